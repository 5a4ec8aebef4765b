package lifecycle

import (
	"context"
	"net/netip"
	"time"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/registry"
)

// The registry and agent roles the lifecycle needs. *registry.Store
// implements the registry's on Postgres, agentclient the agent's over
// Caddy's control listener.

// Sandboxes are the users' sandbox rows. Reads return registry.ErrNotFound
// for a user without one.
type Sandboxes interface {
	Sandbox(ctx context.Context, user string) (registry.Sandbox, error)
	Sandboxes(ctx context.Context) ([]registry.Sandbox, error)
	CreateSandbox(ctx context.Context, user string, pick registry.SubnetPicker) (registry.Sandbox, error)
	// UpdateSandbox writes a row's mutable fields but its token hash.
	UpdateSandbox(ctx context.Context, sb registry.Sandbox) error
	// SetSandboxToken writes a row's token hash.
	SetSandboxToken(ctx context.Context, user string, tokenHash []byte) error
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
	// ClaimIfUnclaimed is Claim that never replaces a token: an agent that
	// is user's already under another token answers
	// sandboxapi.ErrClaimedAlready. The claim from the warm pool sends it.
	ClaimIfUnclaimed(ctx context.Context, ep netip.AddrPort, user, token string) error
	// PrepareIdle asks the agent to close its storage (POST /pause?if_idle=1).
	// busy is true while it has a request in flight or work due; wakeAt is
	// its next due time, if any.
	PrepareIdle(ctx context.Context, ep netip.AddrPort) (busy bool, wakeAt *time.Time, err error)
	// Wake asks the agent to reopen storage and run due work (POST /wake).
	Wake(ctx context.Context, ep netip.AddrPort) error
}

var _ Registry = (*registry.Store)(nil)
