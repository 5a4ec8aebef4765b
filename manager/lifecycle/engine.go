package lifecycle

import (
	"context"
	"errors"
	"net/netip"
)

// The engine is what runs sandboxes: *provision.Docker on one host,
// *kube.Engine on a cluster, the in-memory fake in the unit tests. This
// file is its vocabulary, owned here: each engine converts its own words
// (Docker's "exited", a Pod's phase) to these, and the contract suite
// (enginetest) holds every engine to them. Every method is idempotent:
// creating what exists returns it, removing what is gone is not an error.
//
// Engine is what every engine does. Pausing and per-sandbox networks are
// capabilities only some engines have (Pauser, Networks): the lifecycle
// asks for them, and where an engine lacks one it does without (the first
// idle tier stops instead of pausing; the engine isolates sandboxes its
// own way).

// ErrNotFound is returned by Inspect for a sandbox with no container.
var ErrNotFound = errors.New("not found")

// Names identify one sandbox's objects on an engine. Stack separates two
// installations (dev and the test run) on one engine; Sandbox is the name
// the registry records (the user id for a sandbox made for its user, a
// pool name for one claimed from the warm pool). Each engine derives its
// object names from them.
type Names struct {
	Stack, Sandbox string
}

// Status is a sandbox container's state as its engine reports it.
type Status string

const (
	// StatusStopped: made and not running, or not yet ready (never
	// started, exited, dead; a Pod pending, ended or being deleted); Start
	// runs it, or waits until it runs.
	StatusStopped Status = "stopped"
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	// StatusUnknown: a state the lifecycle has no step for (Docker's
	// "restarting" or "removing"); it looks again later.
	StatusUnknown Status = "unknown"
)

// Container is a sandbox's container: whatever the engine runs the agent
// in (a Docker container, a Kubernetes Pod with its NetworkPolicy).
type Container struct {
	ID      string // the engine's handle for Start, Stop, Pause, Unpause
	Sandbox string
	Status  Status
	// Endpoint is where the agent listens, once it runs.
	Endpoint netip.AddrPort
}

// EventKind is what an engine event says happened to a container. Events
// only say where to look again: the lifecycle then asks the engine.
type EventKind string

const (
	EventStarted  EventKind = "started"
	EventPaused   EventKind = "paused"
	EventUnpaused EventKind = "unpaused"
	// EventDied: the container stopped, whoever stopped it (the lifecycle
	// tells a death from its own stop).
	EventDied    EventKind = "died"
	EventRemoved EventKind = "removed"
	// EventChanged: anything else about the container (a kill signal, an
	// out-of-memory kill before its death).
	EventChanged EventKind = "changed"
)

// Event is a change to one of the stack's containers. Sandbox is empty for
// the stack's own containers: an EventStarted without a sandbox says the
// gateway (Caddy) started again and lost its sandbox networks.
type Event struct {
	Sandbox string
	Kind    EventKind
}

// Inventory is every labelled object of a stack, by sandbox name.
type Inventory struct {
	Containers map[string][]Container
	Networks   map[string][]string
	Volumes    map[string][]string
}

// NewInventory returns an empty Inventory ready to fill.
func NewInventory() Inventory {
	return Inventory{Containers: map[string][]Container{}, Networks: map[string][]string{}, Volumes: map[string][]string{}}
}

// Names lists every sandbox name that has any object in the inventory.
func (inv Inventory) Names() []string {
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for name := range inv.Containers {
		add(name)
	}
	for name := range inv.Networks {
		add(name)
	}
	for name := range inv.Volumes {
		add(name)
	}
	return out
}

// Count is how many objects the inventory holds for sandbox name.
func (inv Inventory) Count(name string) int {
	return len(inv.Containers[name]) + len(inv.Networks[name]) + len(inv.Volumes[name])
}

// Containers runs sandbox containers.
type Containers interface {
	// Inspect returns the sandbox's container, or ErrNotFound.
	Inspect(ctx context.Context, n Names) (Container, error)
	// Create makes the container; it carries no identity (see
	// Agent.Claim). An engine with Networks puts it at a fixed address in
	// subnet; others ignore subnet and report the address on Inspect.
	Create(ctx context.Context, n Names, subnet netip.Prefix) (Container, error)
	// Start runs a stopped container.
	Start(ctx context.Context, id string) error
	// Stop stops it; its volumes stay.
	Stop(ctx context.Context, id string) error
	RemoveContainer(ctx context.Context, n Names) error
}

// Pauser is the capability to freeze a running container and thaw it.
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
}

// Networks is the capability of engines that give each sandbox its own
// network, joined by the gateway, with the agent at a fixed address in the
// sandbox's subnet (subnet.SandboxIP).
type Networks interface {
	EnsureNetwork(ctx context.Context, n Names, subnet netip.Prefix) (id string, err error)
	ConnectGateway(ctx context.Context, n Names, networkID string, subnet netip.Prefix) error
	// GatewaySandboxes names the sandboxes whose network the gateway is
	// on now.
	GatewaySandboxes(ctx context.Context) (map[string]bool, error)
}

// Volumes holds a sandbox's two volumes.
type Volumes interface {
	EnsureVolumes(ctx context.Context, n Names) error
	// RemoveAll removes container, network and volumes (a reset).
	RemoveAll(ctx context.Context, n Names) error
}

// Watcher lists the stack's objects and follows their events.
type Watcher interface {
	List(ctx context.Context) (Inventory, error)
	Events(ctx context.Context) (<-chan Event, <-chan error)
}

// Engine is every role all engines have.
type Engine interface {
	Containers
	Volumes
	Watcher
}
