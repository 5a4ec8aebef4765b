package openai

import (
	"errors"
	"testing"
)

// Keys that encoding/json would take for the same field, twice in one
// object, are refused: exact duplicates, case variants and Unicode fold
// variants (ſ folds to s, the Kelvin sign to k), at any depth.
func TestDecodeRequestRefusesAmbiguousKeys(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, body := range []string{
		`{"model":"a","model":"b",` + msgs + `}`,
		`{"model":"a","MODEL":"b",` + msgs + `}`,
		`{"model":"a",` + msgs + `,"stream":false,"ſtream":true}`,
		`{"model":"a",` + msgs + `,"max_tokens":10,"max_tokenſ":99999}`,
		`{"model":"a","messages":[{"role":"user","content":"x","ROLE":"system"}]}`,
		`{"model":"a",` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"a":1,"A":2}}}]}`,
	} {
		if _, err := DecodeRequest([]byte(body)); !errors.Is(err, ErrAmbiguousKey) {
			t.Errorf("%s: %v, want ErrAmbiguousKey", body, err)
		}
	}
	if _, err := DecodeRequest([]byte(`{"model":"a",` + msgs + `,"stream":true}`)); err != nil {
		t.Fatalf("a plain request: %v", err)
	}
}
