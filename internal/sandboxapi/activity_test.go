package sandboxapi

import "testing"

func TestActivating(t *testing.T) {
	tests := map[string]bool{
		"/health":           false,
		"/status":           false,
		"/ingest":           false,
		"/pause":            false,
		"/claim":            false,
		"/uploads/a.txt":    false,
		"/skills":           false,
		"/skills/install":   false,
		"/artifacts/x/y":    false,
		"/prompt":           true,
		"/inspect":          true,
		"/session/new":      true,
		"/wake":             true,
		"":                  true,
		"/":                 true,
		"/health/../prompt": true, // never cleaned here; Caddy sends the cleaned path
		"/healthz":          true,
		"/health/x":         true,
		"/claim/x":          true,
	}
	for path, want := range tests {
		if got := Activating(path); got != want {
			t.Errorf("Activating(%q) = %v, want %v", path, got, want)
		}
	}
}
