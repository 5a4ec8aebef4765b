package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The owner stops a run whose model call is in flight: 200, then the
// conversation shows "stopped" and no reply; stopping it again is 409, an
// id that is no run 404, a bad id 400. The same route is there for a named
// agent.
func TestStopRoute(t *testing.T) {
	a := newAgent(t)
	release := make(chan struct{})
	a.holdMu.Lock()
	a.hold = release
	a.holdMu.Unlock()
	defer close(release)
	code, m := a.do("POST", "/prompt", `{"text":"a long think","wait":false}`)
	if code != 202 {
		t.Fatalf("prompt: %d %v", code, m)
	}
	run := fmt.Sprint(int64(m["run_id"].(float64)))
	select {
	case <-a.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was not called")
	}
	if code, m := a.do("POST", "/runs/"+run+"/stop", ""); code != 200 || m["status"] != "stopped" {
		t.Fatalf("stop: %d %v", code, m)
	}
	_, insp := a.do("GET", "/inspect?limit=100", "")
	var kinds []string
	for _, e := range insp["entries"].(map[string]any)["items"].([]any) {
		kinds = append(kinds, e.(map[string]any)["kind"].(string))
	}
	if k := strings.Join(kinds, ","); k != "owner_message,stopped" {
		t.Fatalf("entries after the stop: %s", k)
	}
	if code, m := a.do("POST", "/runs/"+run+"/stop", ""); code != 409 || m["type"] == nil {
		t.Fatalf("stop twice: %d %v", code, m)
	}
	for path, want := range map[string]int{"/runs/987654/stop": 404, "/runs/x/stop": 400, "/runs/0/stop": 400, "/agents/main/runs/987654/stop": 404} {
		if code, m := a.do("POST", path, ""); code != want {
			t.Errorf("%s: %d %v, want %d", path, code, m, want)
		}
	}
}
