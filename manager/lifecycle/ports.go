package lifecycle

import (
	"context"
	"net/netip"
	"time"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/provision"
	"github.com/affido/affido/manager/registry"
)

// The engine roles the lifecycle drives. *provision.Docker implements them
// against a Docker engine, *kube.Engine against a Kubernetes API server;
// the contract suite (enginetest) runs against both. Every method is
// idempotent: creating what exists returns it, removing what is gone is not
// an error.
//
// Engine is what every engine does. Pausing and per-sandbox networks are
// capabilities only some engines have (Pauser, Networks): the lifecycle
// asks for them, and where an engine lacks one it does without (the first
// idle tier stops instead of pausing; the engine isolates sandboxes its
// own way).

// Containers runs sandbox containers. A sandbox's "container" is whatever
// the engine runs the agent in (a Docker container, a Kubernetes Pod with
// its NetworkPolicy).
type Containers interface {
	// Inspect returns the sandbox's container, or provision.ErrNotFound.
	// Endpoint is where the agent listens, once the container runs.
	Inspect(ctx context.Context, n provision.Names) (provision.Container, error)
	// Create makes the container; it carries no identity (see
	// Agent.Claim). An engine with Networks puts it at a fixed address in
	// subnet; others ignore subnet and report the address on Inspect.
	Create(ctx context.Context, n provision.Names, subnet netip.Prefix) (provision.Container, error)
	// Start runs a created or exited container.
	Start(ctx context.Context, id string) error
	// Stop stops it; its volumes stay.
	Stop(ctx context.Context, id string) error
	RemoveContainer(ctx context.Context, n provision.Names) error
}

// Pauser is the capability to freeze a running container and thaw it.
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
}

// Networks is the capability of engines that give each sandbox its own
// network, joined by the gateway, with the agent at a fixed address in the
// sandbox's subnet (provision.SandboxIP).
type Networks interface {
	EnsureNetwork(ctx context.Context, n provision.Names, subnet netip.Prefix) (id string, err error)
	ConnectGateway(ctx context.Context, n provision.Names, networkID string, subnet netip.Prefix) error
	// GatewayNetworks names the networks the gateway is on now.
	GatewayNetworks(ctx context.Context) (map[string]bool, error)
}

// Volumes holds a sandbox's two volumes.
type Volumes interface {
	EnsureVolumes(ctx context.Context, n provision.Names) error
	// RemoveAll removes container, network and volumes (a reset).
	RemoveAll(ctx context.Context, n provision.Names) error
}

// Watcher lists the stack's objects and follows their events.
type Watcher interface {
	List(ctx context.Context) (provision.Inventory, error)
	Events(ctx context.Context) (<-chan provision.Event, <-chan error)
}

// Engine is every role all engines have.
type Engine interface {
	Containers
	Volumes
	Watcher
}

// The registry roles. *registry.Store implements them on Postgres.

// Sandboxes are the users' sandbox rows. Reads return registry.ErrNotFound
// for a user without one.
type Sandboxes interface {
	Sandbox(ctx context.Context, user string) (registry.Sandbox, error)
	Sandboxes(ctx context.Context) ([]registry.Sandbox, error)
	CreateSandbox(ctx context.Context, user string, pick registry.SubnetPicker) (registry.Sandbox, error)
	UpdateSandbox(ctx context.Context, sb registry.Sandbox) error
	DeleteSandbox(ctx context.Context, user string) error
	ReportWake(ctx context.Context, user string, at *time.Time) error
}

// PoolRows are the warm pool's rows. ClaimPoolSandbox moves one to the
// user's sandboxes atomically, or returns registry.ErrNotFound;
// DeletePoolSandbox returns registry.ErrNotFound for a row claimed meanwhile.
type PoolRows interface {
	CreatePoolSandbox(ctx context.Context, name, image string, pick registry.SubnetPicker) (registry.PoolSandbox, error)
	PoolSandboxes(ctx context.Context) ([]registry.PoolSandbox, error)
	UpdatePoolSandbox(ctx context.Context, p registry.PoolSandbox) error
	DeletePoolSandbox(ctx context.Context, name string) error
	ClaimPoolSandbox(ctx context.Context, user, image string, tokenHash []byte) (registry.Sandbox, error)
}

// Locker serializes provisioning of one user across managers.
type Locker interface {
	LockUser(ctx context.Context, user string) (release func(), err error)
}

// Auditor records lifecycle events for operators.
type Auditor interface {
	Audit(ctx context.Context, user, kind string, detail map[string]any) error
}

// Registry is every registry role at once.
type Registry interface {
	Sandboxes
	PoolRows
	Locker
	Auditor
}

// Agent is how the manager talks to a sandbox's agent.
type Agent interface {
	// Health returns the agent's GET /health answer once it is 200.
	Health(ctx context.Context, ep netip.AddrPort) (sandboxapi.Health, error)
	// Claim binds the agent to user with a fresh gateway token (POST
	// /claim over the control path); an agent bound to another user
	// refuses.
	Claim(ctx context.Context, ep netip.AddrPort, user, token string) error
	// PrepareIdle asks the agent to close its storage (POST /pause?if_idle=1).
	// busy is true while it has a request in flight or work due; wakeAt is
	// its next due time, if any.
	PrepareIdle(ctx context.Context, ep netip.AddrPort) (busy bool, wakeAt *time.Time, err error)
	// Wake asks the agent to reopen storage and run due work (POST /wake).
	Wake(ctx context.Context, ep netip.AddrPort) error
}

var (
	_ Engine   = (*provision.Docker)(nil)
	_ Pauser   = (*provision.Docker)(nil)
	_ Networks = (*provision.Docker)(nil)
	_ Registry = (*registry.Store)(nil)
)
