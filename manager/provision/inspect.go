package provision

import (
	"context"
	"fmt"
	"net/netip"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/affido/affido/manager/lifecycle"
)

// Inspect returns the sandbox's container, or lifecycle.ErrNotFound.
func (d *Docker) Inspect(ctx context.Context, n lifecycle.Names) (lifecycle.Container, error) {
	res, err := d.cli.ContainerInspect(ctx, ContainerName(n), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return lifecycle.Container{}, lifecycle.ErrNotFound
	}
	if err != nil {
		return lifecycle.Container{}, fmt.Errorf("inspect container %s: %w", ContainerName(n), err)
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[lifecycle.LabelStack] != n.Stack || sandboxOf(c.Config.Labels) != n.Sandbox {
		return lifecycle.Container{}, fmt.Errorf("inspect container %s: exists but is not labelled for %s/%s", ContainerName(n), n.Stack, n.Sandbox)
	}
	out := lifecycle.Container{ID: c.ID, Sandbox: n.Sandbox, Status: lifecycle.StatusUnknown}
	if c.State != nil {
		out.Status = statusOf(string(c.State.Status))
	}
	if c.NetworkSettings != nil {
		if ep := c.NetworkSettings.Networks[NetworkName(n)]; ep != nil && ep.IPAddress.IsValid() {
			out.Endpoint = netip.AddrPortFrom(ep.IPAddress, d.cfg.AgentPort)
		}
	}
	return out, nil
}

// statusOf is the lifecycle's word for a Docker container state.
func statusOf(state string) lifecycle.Status {
	switch state {
	case "running":
		return lifecycle.StatusRunning
	case "paused":
		return lifecycle.StatusPaused
	case "created", "exited", "dead":
		return lifecycle.StatusStopped
	}
	return lifecycle.StatusUnknown // restarting, removing
}
