package lifecycle

import "github.com/affido/affido/manager/registry"

// State is where a sandbox is in its life, as the manager sees it.
//
//	pool ──claim──▶ running ◀──resume── paused ◀──pause── running
//	(none) ──provision──▶ provisioning ──▶ running
//	running ──▶ paused ──▶ stopped ──▶ removed (volumes stay) ──▶ provisioning
//	started ──a bring-up sees its agent, bound to the user──▶ running
//
// Started is a container the engine says runs but whose agent this manager
// has not seen answer since (adopted, or read after an engine event):
// requests wait for a bring-up to check it first.
//
// Pausing is the short step in which the manager has asked the agent to go
// idle and not yet frozen it: requests wait for the outcome rather than
// reach a container that is about to stop answering.
//
// This file is the one place where the core's states meet the engine's
// Status and the registry's stored words.
type State string

const (
	Unknown      State = "unknown" // not yet read from the engine
	Pool         State = "pool"    // a warm-pool sandbox, nobody's yet
	Provisioning State = "provisioning"
	Started      State = "started" // running per the engine, agent not yet checked
	Running      State = "running"
	Pausing      State = "pausing"
	Paused       State = "paused"
	Stopped      State = "stopped"
	Removed      State = "removed"
)

// counts reports whether a sandbox in s takes a running slot.
func (s State) counts() bool { return s.up() || s == Pausing || s == Provisioning }

// up reports whether the container of a sandbox in s runs.
func (s State) up() bool { return s == Running || s == Started }

// down reports whether s is one of the tiers a sandbox sleeps in.
func (s State) down() bool { return s == Paused || s == Stopped || s == Removed }

// stored is the registry's word for s.
func (s State) stored() string {
	switch s {
	case Running, Started, Pausing:
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

// storedState is the State of a registry word.
func storedState(word string) State {
	switch word {
	case registry.StateRunning:
		return Running
	case registry.StatePaused:
		return Paused
	case registry.StateStopped:
		return Stopped
	case registry.StateRemoved:
		return Removed
	case registry.StateProvisioning:
		return Provisioning
	}
	return Unknown
}

// engineState is the State of a container the engine reports (a missing
// container is Removed; see Inspect's ErrNotFound). A running one is only
// Started: the engine does not say whose agent answers in it.
func engineState(s Status) State {
	switch s {
	case StatusRunning:
		return Started
	case StatusPaused:
		return Paused
	case StatusStopped:
		return Stopped
	}
	return Unknown // look again
}
