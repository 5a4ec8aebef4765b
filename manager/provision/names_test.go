package provision

import (
	"testing"

	"github.com/affido/affido/manager/lifecycle"
)

func TestDockerNames(t *testing.T) {
	n := lifecycle.Names{Stack: "affido", Sandbox: "dev-user"}
	got := []string{ContainerName(n), NetworkName(n), SessionVolumeName(n), WorkspaceVolumeName(n)}
	want := []string{"affido-dev-user-agent", "affido-dev-user-net", "affido-dev-user-session", "affido-dev-user-workspace"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("name %d = %q, want %q", i, got[i], want[i])
		}
	}
}

// Two different users never share an object name of the same kind.
func TestNamesDoNotCollide(t *testing.T) {
	users := []string{"a", "a-net", "a-agent", "a-session", "a-workspace", "net", "a-a", "a_net"}
	seen := map[string]string{}
	for _, u := range users {
		n := lifecycle.Names{Stack: "s", Sandbox: u}
		for kind, name := range map[string]string{"c": ContainerName(n), "n": NetworkName(n), "v1": SessionVolumeName(n), "v2": WorkspaceVolumeName(n)} {
			k := kind[:1] + ":" + name
			if prev, ok := seen[k]; ok && prev != u {
				t.Errorf("%s used by %s and %s", k, prev, u)
			}
			seen[k] = u
		}
	}
}

// Docker's words map to the lifecycle's, and the healthcheck's exec events
// are not taken for changes.
func TestDockerVocabulary(t *testing.T) {
	for docker, want := range map[string]lifecycle.Status{"created": lifecycle.StatusStopped, "running": lifecycle.StatusRunning,
		"paused": lifecycle.StatusPaused, "exited": lifecycle.StatusStopped, "dead": lifecycle.StatusStopped,
		"restarting": lifecycle.StatusUnknown, "removing": lifecycle.StatusUnknown} {
		if got := statusOf(docker); got != want {
			t.Errorf("status %q = %q, want %q", docker, got, want)
		}
	}
	for action, want := range map[string]lifecycle.EventKind{"start": lifecycle.EventStarted, "pause": lifecycle.EventPaused,
		"unpause": lifecycle.EventUnpaused, "die": lifecycle.EventDied, "destroy": lifecycle.EventRemoved, "oom": lifecycle.EventChanged} {
		if got, ok := eventKind(action); !ok || got != want {
			t.Errorf("event %q = %q, %v; want %q", action, got, ok, want)
		}
	}
	for _, action := range []string{"exec_create: /bin/affido-agent health", "exec_start: x", "health_status: healthy", "create"} {
		if _, ok := eventKind(action); ok {
			t.Errorf("event %q taken as a change", action)
		}
	}
}
