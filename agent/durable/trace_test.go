package durable_test

import (
	"encoding/json"
	"testing"

	"github.com/affido/affido/agent/durable"
)

// Every model call's entry keeps its tokens and how long it took, for the
// trace's tree (run, model call, tool call, result).
func TestModelCallEntriesKeepTokensAndDuration(t *testing.T) {
	e := newEnv(t, durable.Options{})
	e.ask(1, durable.Input{Text: "hello"})
	var found bool
	for _, x := range e.entries(1) {
		if x.Kind != durable.AssistantMessage {
			continue
		}
		var d struct {
			In       *int64 `json:"input_tokens"`
			Out      *int64 `json:"output_tokens"`
			Duration *int64 `json:"duration_ms"`
		}
		if err := json.Unmarshal(x.Data, &d); err != nil || d.In == nil || d.Out == nil || d.Duration == nil {
			t.Fatalf("assistant entry data %s: %v", x.Data, err)
		}
		if *d.In != 5 || *d.Out != 2 || *d.Duration < 0 {
			t.Fatalf("tokens %d/%d, %d ms; the echo model says 5/2", *d.In, *d.Out, *d.Duration)
		}
		found = true
	}
	if !found {
		t.Fatal("no assistant entry")
	}
}
