package provision

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/affido/affido/internal/sandboxapi"
)

// ErrNotFound is returned when a sandbox object does not exist.
var ErrNotFound = errors.New("not found")

// GatewayAlias is the name sandboxes reach Caddy's gateway listener by.
const GatewayAlias = "gateway"

// Config describes the sandboxes a Docker provisioner creates.
type Config struct {
	Stack            string // name prefix and affido.stack label
	Image            string // agent image, built locally
	AgentPort        uint16 // port the agent listens on in its container
	GatewayContainer string // Caddy's container, joined to every user network as "gateway"
	GatewayURL       string // base URL the agent uses for the gateway
	MemoryBytes      int64
	NanoCPUs         int64
	PidsLimit        int64
	Env              []string // extra environment for the agent (AFFIDO_MODEL=...)
}

// Docker provisions sandboxes through the Docker Engine API.
type Docker struct {
	cli *client.Client
	cfg Config
}

// NewDocker connects to the engine named by the environment (DOCKER_HOST),
// negotiating the API version on first use.
func NewDocker(cfg Config) (*Docker, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if cfg.AgentPort == 0 {
		cfg.AgentPort = 8080
	}
	return &Docker{cli: cli, cfg: cfg}, nil
}

// Close releases the client.
func (d *Docker) Close() error { return d.cli.Close() }

// Ping checks that the engine answers.
func (d *Docker) Ping(ctx context.Context) error {
	_, err := d.cli.Ping(ctx, client.PingOptions{})
	return err
}

// CheckImage reports a clear error when the agent image is missing.
func (d *Docker) CheckImage(ctx context.Context) error {
	if _, err := d.cli.ImageInspect(ctx, d.cfg.Image); err != nil {
		return fmt.Errorf("agent image %s: %w (build it with ./dev.sh build)", d.cfg.Image, err)
	}
	return nil
}

// ImageID returns the ID of the agent image, so a pool built from an
// older image can be told apart.
func (d *Docker) ImageID(ctx context.Context) (string, error) {
	res, err := d.cli.ImageInspect(ctx, d.cfg.Image)
	if err != nil {
		return "", fmt.Errorf("inspect agent image %s: %w", d.cfg.Image, err)
	}
	return res.ID, nil
}

// Container is what the manager needs to know of a sandbox container.
type Container struct {
	ID       string
	Sandbox  string
	Status   string // created, running, paused, exited, dead
	Endpoint netip.AddrPort
}

// Running reports whether the container runs unpaused.
func (c Container) Running() bool { return c.Status == "running" }

// SandboxIP is the fixed address of the agent inside its subnet: the bridge
// takes the first address, the agent the second, Caddy gets any other.
func SandboxIP(subnet netip.Prefix) netip.Addr { return subnet.Masked().Addr().Next().Next() }

// Inspect returns the sandbox's container, or ErrNotFound.
func (d *Docker) Inspect(ctx context.Context, n Names) (Container, error) {
	res, err := d.cli.ContainerInspect(ctx, n.Container(), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return Container{}, ErrNotFound
	}
	if err != nil {
		return Container{}, fmt.Errorf("inspect container %s: %w", n.Container(), err)
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[LabelStack] != n.Stack || sandboxOf(c.Config.Labels) != n.Sandbox {
		return Container{}, fmt.Errorf("inspect container %s: exists but is not labelled for %s/%s", n.Container(), n.Stack, n.Sandbox)
	}
	out := Container{ID: c.ID, Sandbox: n.Sandbox}
	if c.State != nil {
		out.Status = string(c.State.Status)
	}
	if c.NetworkSettings != nil {
		if ep := c.NetworkSettings.Networks[n.Network()]; ep != nil && ep.IPAddress.IsValid() {
			out.Endpoint = netip.AddrPortFrom(ep.IPAddress, d.cfg.AgentPort)
		}
	}
	return out, nil
}

// EnsureNetwork returns the sandbox's internal network, creating it with subnet
// if it does not exist. Old engines create duplicates for a repeated name,
// so the network is always looked up first.
func (d *Docker) EnsureNetwork(ctx context.Context, n Names, subnet netip.Prefix) (string, error) {
	if id, err := d.findNetwork(ctx, n); err == nil {
		return id, nil
	} else if !errors.Is(err, ErrNotFound) {
		return "", err
	}
	res, err := d.cli.NetworkCreate(ctx, n.Network(), client.NetworkCreateOptions{
		Driver:   "bridge",
		Internal: true,
		Labels:   n.Labels(),
		IPAM: &network.IPAM{Config: []network.IPAMConfig{{
			Subnet:  subnet.Masked(),
			Gateway: subnet.Masked().Addr().Next(),
		}}},
	})
	if err != nil {
		return "", fmt.Errorf("create network %s (%s): %w", n.Network(), subnet, err)
	}
	return res.ID, nil
}

func (d *Docker) findNetwork(ctx context.Context, n Names) (string, error) {
	labels := []string{LabelSandbox}
	if !n.Pool() {
		labels = append(labels, LabelUser) // made before sandboxes had names of their own
	}
	for _, l := range labels {
		res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{
			Filters: make(client.Filters).Add("label", LabelStack+"="+n.Stack).Add("label", l+"="+n.Sandbox),
		})
		if err != nil {
			return "", fmt.Errorf("list networks of %s: %w", n.Sandbox, err)
		}
		for _, nw := range res.Items {
			if nw.Name == n.Network() { // the name filter matches substrings, so compare exactly
				return nw.ID, nil
			}
		}
	}
	return "", ErrNotFound
}

// sandboxOf is the sandbox an object belongs to by its labels. Objects
// made before sandboxes had names of their own carry only the user, which
// was their name.
func sandboxOf(labels map[string]string) string {
	if s := labels[LabelSandbox]; s != "" {
		return s
	}
	return labels[LabelUser]
}

// EnsureVolumes creates the session and workspace volumes; creating an
// existing volume is a no-op in Docker.
func (d *Docker) EnsureVolumes(ctx context.Context, n Names) error {
	for _, name := range []string{n.SessionVolume(), n.WorkspaceVolume()} {
		if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: n.Labels()}); err != nil {
			return fmt.Errorf("create volume %s: %w", name, err)
		}
	}
	return nil
}

// GatewayIP is Caddy's fixed address on a user network: the subnet's last
// usable address, so it never takes the agent's.
func GatewayIP(subnet netip.Prefix) netip.Addr {
	p := subnet.Masked()
	b := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 2 // broadcast - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ConnectGateway joins Caddy's container to the user network with the alias
// "gateway" at GatewayIP. Joining twice is not an error.
func (d *Docker) ConnectGateway(ctx context.Context, n Names, networkID string, subnet netip.Prefix) error {
	if d.cfg.GatewayContainer == "" {
		return nil
	}
	_, err := d.cli.NetworkConnect(ctx, networkID, client.NetworkConnectOptions{
		Container: d.cfg.GatewayContainer,
		EndpointConfig: &network.EndpointSettings{
			Aliases:    []string{GatewayAlias},
			IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: GatewayIP(subnet)},
		},
	})
	if err == nil {
		return nil
	}
	// Already connected shows up as a 403/409 with varying text across versions.
	ins, ierr := d.cli.NetworkInspect(ctx, networkID, client.NetworkInspectOptions{})
	if ierr == nil {
		for _, ep := range ins.Network.Containers {
			if ep.Name == d.cfg.GatewayContainer {
				return nil
			}
		}
	}
	return fmt.Errorf("connect %s to network %s: %w", d.cfg.GatewayContainer, n.Network(), err)
}

// GatewayNetworks returns the names of the networks Caddy's container is on.
func (d *Docker) GatewayNetworks(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	if d.cfg.GatewayContainer == "" {
		return out, nil
	}
	res, err := d.cli.ContainerInspect(ctx, d.cfg.GatewayContainer, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", d.cfg.GatewayContainer, err)
	}
	if res.Container.NetworkSettings != nil {
		for name := range res.Container.NetworkSettings.Networks {
			out[name] = true
		}
	}
	return out, nil
}

// Create creates the hardened agent container on the sandbox's network,
// with a fixed address inside subnet. It returns the existing container if
// one with the name exists already. The container carries no identity: the
// manager tells the agent whose it is over the control path
// (sandboxapi.Claim), so neither the user id nor the gateway token is ever
// in an environment.
func (d *Docker) Create(ctx context.Context, n Names, subnet netip.Prefix) (Container, error) {
	stop := 5
	ip := SandboxIP(subnet)
	_, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: n.Container(),
		Config: &container.Config{
			Image: d.cfg.Image,
			// Root with CAP_SETUID and CAP_SETGID only, and only until the
			// agent has started its tool runner under the tools' uid and
			// dropped itself to the agent's (agent/privsep).
			User:   "0:0",
			Labels: n.Labels(),
			// The only address the agent's API answers: Caddy's on this network.
			Env:         AgentEnv(d.cfg.AgentPort, d.cfg.GatewayURL, Caller{IP: GatewayIP(subnet).String()}, d.cfg.Env),
			StopTimeout: &stop,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(n.Network()),
			ReadonlyRootfs: true,
			CapDrop:        []string{"ALL"},
			CapAdd:         []string{"SETUID", "SETGID"},
			SecurityOpt:    []string{"no-new-privileges:true"},
			Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=64m"},
			Mounts: []mount.Mount{
				{Type: mount.TypeVolume, Source: n.SessionVolume(), Target: "/data"},
				{Type: mount.TypeVolume, Source: n.WorkspaceVolume(), Target: "/workspace"},
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
			n.Network(): {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip}},
		}},
	})
	if err != nil && !cerrdefs.IsConflict(err) {
		return Container{}, fmt.Errorf("create container %s: %w", n.Container(), err)
	}
	return d.Inspect(ctx, n)
}

// Start starts a created or exited container.
func (d *Docker) Start(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start container %s: %w", short(id), err)
	}
	return nil
}

// Pause freezes a running container.
func (d *Docker) Pause(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("pause container %s: %w", short(id), err)
	}
	return nil
}

// Unpause thaws a paused container.
func (d *Docker) Unpause(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("unpause container %s: %w", short(id), err)
	}
	return nil
}

// Stop stops a container, unpausing it first (a paused container cannot
// receive the stop signal).
func (d *Docker) Stop(ctx context.Context, id string) error {
	timeout := 5
	if _, err := d.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		return fmt.Errorf("stop container %s: %w", short(id), err)
	}
	return nil
}

// RemoveContainer removes the sandbox's container; named volumes stay.
func (d *Docker) RemoveContainer(ctx context.Context, n Names) error {
	_, err := d.cli.ContainerRemove(ctx, n.Container(), client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", n.Container(), err)
	}
	return nil
}

// RemoveAll removes the container, the network and both volumes (a reset).
func (d *Docker) RemoveAll(ctx context.Context, n Names) error {
	if err := d.RemoveContainer(ctx, n); err != nil {
		return err
	}
	for {
		id, err := d.findNetwork(ctx, n)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			return err
		}
		if d.cfg.GatewayContainer != "" {
			_, _ = d.cli.NetworkDisconnect(ctx, id, client.NetworkDisconnectOptions{Container: d.cfg.GatewayContainer, Force: true})
		}
		if _, err := d.cli.NetworkRemove(ctx, id, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove network %s: %w", n.Network(), err)
		}
	}
	for _, v := range []string{n.SessionVolume(), n.WorkspaceVolume()} {
		if _, err := d.cli.VolumeRemove(ctx, v, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove volume %s: %w", v, err)
		}
	}
	return nil
}

// Inventory lists every labelled object of this stack, by sandbox name.
type Inventory struct {
	Containers map[string][]Container
	Networks   map[string][]string
	Volumes    map[string][]string
}

// List returns the stack's labelled containers, networks and volumes.
func (d *Docker) List(ctx context.Context) (Inventory, error) {
	inv := Inventory{Containers: map[string][]Container{}, Networks: map[string][]string{}, Volumes: map[string][]string{}}
	f := make(client.Filters).Add("label", LabelStack+"="+d.cfg.Stack).Add("label", LabelManaged+"=true")
	cs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return inv, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs.Items {
		u := sandboxOf(c.Labels)
		inv.Containers[u] = append(inv.Containers[u], Container{ID: c.ID, Sandbox: u, Status: string(c.State)})
	}
	ns, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return inv, fmt.Errorf("list networks: %w", err)
	}
	for _, nw := range ns.Items {
		u := sandboxOf(nw.Labels)
		inv.Networks[u] = append(inv.Networks[u], nw.Name)
	}
	vs, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return inv, fmt.Errorf("list volumes: %w", err)
	}
	for _, v := range vs.Items {
		u := sandboxOf(v.Labels)
		inv.Volumes[u] = append(inv.Volumes[u], v.Name)
	}
	return inv, nil
}

// Event is a container lifecycle event of this stack.
type Event struct {
	Sandbox string // empty for non-sandbox containers of the stack (Caddy)
	Name    string
	Action  string
}

// Events streams container events of this stack until ctx ends or the
// stream breaks; the error channel then carries the reason.
func (d *Docker) Events(ctx context.Context) (<-chan Event, <-chan error) {
	res := d.cli.Events(ctx, client.EventsListOptions{
		Filters: make(client.Filters).Add("type", string(events.ContainerEventType)).Add("label", LabelStack+"="+d.cfg.Stack),
	})
	out := make(chan Event)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			select {
			case m := <-res.Messages:
				ev := Event{Sandbox: sandboxOf(m.Actor.Attributes), Name: m.Actor.Attributes["name"], Action: string(m.Action)}
				select {
				case out <- ev:
				case <-ctx.Done():
					errc <- ctx.Err()
					return
				}
			case err := <-res.Err:
				errc <- fmt.Errorf("docker event stream: %w", err)
				return
			}
		}
	}()
	return out, errc
}

// Caller is who an agent's API answers: Caddy's address (Docker, where
// Caddy has a fixed one on each user network) or the hash of the key Caddy
// sends (Kubernetes, where its Pods come and go); either or both.
type Caller struct {
	IP      string
	KeyHash string // sandboxapi.CallerKeyHash of the key
}

// AgentEnv is the environment of an agent container on any engine: where
// its volumes are mounted, where it listens, the gateway's URL, who its API
// answers, then extra.
func AgentEnv(port uint16, gatewayURL string, caller Caller, extra []string) []string {
	env := []string{
		sandboxapi.EnvSessionDB + "=/data/session.db",
		sandboxapi.EnvWorkspace + "=/workspace",
		fmt.Sprintf("%s=:%d", sandboxapi.EnvListen, port),
		sandboxapi.EnvGatewayURL + "=" + gatewayURL,
	}
	if caller.IP != "" {
		env = append(env, sandboxapi.EnvCallerIP+"="+caller.IP)
	}
	if caller.KeyHash != "" {
		env = append(env, sandboxapi.EnvCallerKeyHash+"="+caller.KeyHash)
	}
	return append(env, extra...)
}

func short(id string) string {
	if len(id) > 12 && !strings.Contains(id, "-") {
		return id[:12]
	}
	return id
}

// Names lists every sandbox name that has any object in the inventory.
func (inv Inventory) Names() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]int{lens(inv.Containers), lens(inv.Networks), lens(inv.Volumes)} {
		for name := range m {
			if !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out
}

// Count is how many objects the inventory holds for sandbox name.
func (inv Inventory) Count(name string) int {
	return len(inv.Containers[name]) + len(inv.Networks[name]) + len(inv.Volumes[name])
}

func lens[V any](m map[string][]V) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}
