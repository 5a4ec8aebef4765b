package openai

import (
	"encoding/json"
	"testing"
)

// The model list keeps the bytes the gateway wrote before it was typed.
func TestModelListWire(t *testing.T) {
	for models, want := range map[string]string{
		"a/b": `{"data":[{"id":"a/b","object":"model"}],"object":"list"}`,
		"":    `{"data":null,"object":"list"}`,
	} {
		var in []string
		if models != "" {
			in = []string{models}
		}
		b, _ := json.Marshal(NewModelList(in))
		if string(b) != want {
			t.Errorf("%q: %s, want %s", models, b, want)
		}
	}
}
