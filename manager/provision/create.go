package provision

import (
	"context"
	"fmt"
	"net/netip"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/subnet"
)

// shmSize is the size of a sandbox's /dev/shm (Docker's default is 64 MiB).
const shmSize = 8 << 20

// Create creates the hardened agent container on the sandbox's network,
// with a fixed address inside subnet. It returns the existing container if
// one with the name exists already. The container carries no identity: the
// manager tells the agent whose it is over the control path
// (sandboxapi.Claim), so neither the user id nor the gateway token is ever
// in an environment.
func (d *Docker) Create(ctx context.Context, n lifecycle.Names, sn netip.Prefix) (lifecycle.Container, error) {
	stop := 5
	ip := subnet.SandboxIP(sn)
	_, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: ContainerName(n),
		Config: &container.Config{
			Image: d.cfg.Image,
			// Root with CAP_SETUID and CAP_SETGID only, and only until the
			// agent has started its tool runner under the tools' uid and
			// dropped itself to the agent's (agent/privsep).
			User:   "0:0",
			Labels: n.Labels(),
			// The only address the agent's API answers: Caddy's on this network.
			Env:         sandboxapi.AgentEnv(d.cfg.AgentPort, d.cfg.GatewayURL, sandboxapi.Caller{IP: subnet.GatewayIP(sn).String()}, d.cfg.Env),
			StopTimeout: &stop,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(NetworkName(n)),
			ReadonlyRootfs: true,
			CapDrop:        []string{"ALL"},
			CapAdd:         []string{"SETUID", "SETGID"},
			SecurityOpt:    []string{"no-new-privileges:true"},
			Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=64m"},
			// /dev/shm is outside the workspace quota: small, and emptied
			// after every tool call (agent/runner Scratch).
			ShmSize: shmSize,
			Mounts: []mount.Mount{
				{Type: mount.TypeVolume, Source: SessionVolumeName(n), Target: "/data"},
				{Type: mount.TypeVolume, Source: WorkspaceVolumeName(n), Target: "/workspace"},
			},
			Resources: container.Resources{
				Memory:     d.cfg.MemoryBytes,
				MemorySwap: d.cfg.MemoryBytes,
				NanoCPUs:   d.cfg.NanoCPUs,
				PidsLimit:  &d.cfg.PidsLimit,
			},
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		},
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			NetworkName(n): {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip}},
		}},
	})
	if err != nil && !cerrdefs.IsConflict(err) {
		return lifecycle.Container{}, fmt.Errorf("create container %s: %w", ContainerName(n), err)
	}
	return d.Inspect(ctx, n)
}
