package lifecycle

import "github.com/affido/affido/manager/registry"

// State is where a sandbox is in its life, as the manager sees it.
//
//	pool ──claim──▶ running ◀──resume── paused ◀──pause── running
//	(none) ──provision──▶ provisioning ──▶ running
//	running ──▶ paused ──▶ stopped ──▶ removed (volumes stay) ──▶ provisioning
//
// Pausing is the short step in which the manager has asked the agent to go
// idle and not yet frozen it: requests wait for the outcome rather than
// reach a container that is about to stop answering.
type State string

const (
	Unknown      State = "unknown" // not yet read from the engine
	Pool         State = "pool"    // a warm-pool sandbox, nobody's yet
	Provisioning State = "provisioning"
	Running      State = "running"
	Pausing      State = "pausing"
	Paused       State = "paused"
	Stopped      State = "stopped"
	Removed      State = "removed"
)

// counts reports whether a sandbox in s takes a running slot.
func (s State) counts() bool { return s == Running || s == Pausing || s == Provisioning }

// stored is the registry's word for s.
func (s State) stored() string {
	switch s {
	case Running, Pausing:
		return registry.StateRunning
	case Paused:
		return registry.StatePaused
	case Stopped:
		return registry.StateStopped
	case Removed:
		return registry.StateRemoved
	}
	return registry.StateProvisioning
}

// engineState maps a container status to a State.
func engineState(status string) State {
	switch status {
	case "running":
		return Running
	case "paused":
		return Paused
	case "created", "exited", "dead":
		return Stopped
	}
	return Unknown
}
