package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"
)

// ErrAmbiguousKey is wrapped when a JSON object names one key twice, or two
// keys that differ only in case: Go's decoder would silently pick one, and a
// provider reading the raw bytes might pick the other.
var ErrAmbiguousKey = errors.New("duplicate or case-variant JSON key")

// DecodeRequest decodes a chat completions request strictly: unknown fields,
// duplicate keys and case variants of a key (at any depth) are refused, and
// nothing may follow the object. What it returns is all a gateway forwards,
// re-encoded: never the bytes it was given.
func DecodeRequest(raw []byte) (ChatRequest, error) {
	var req ChatRequest
	if err := CheckKeys(raw); err != nil {
		return req, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, errors.New("data after the request object")
	}
	return req, nil
}

// CheckKeys walks the JSON value raw and refuses any object in it with an
// ambiguous key (see ErrAmbiguousKey).
func CheckKeys(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]string{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				if prev, ok := seen[foldKey(k)]; ok {
					return fmt.Errorf("%w: %q and %q", ErrAmbiguousKey, prev, k)
				}
				seen[foldKey(k)] = k
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil
	}
	return walk()
}

// CodeSpendLimit is the error code of a call refused because the user's
// spend limit would be passed (HTTP 402, type insufficient_quota).
const CodeSpendLimit = "spend_limit"

// foldKey maps k to one representative of every key encoding/json would
// take for it: each rune to the smallest of its Unicode simple-fold orbit,
// so "model", "MODEL" and "ſtream"/"stream" (U+017F folds to s) collide.
func foldKey(k string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, k)
}

// ErrorEnvelope is the OpenAI error body: {"error":{"message","type","code"}}.
type ErrorEnvelope struct {
	Error ErrorBody `json:"error"`
}

// WriteError answers with the OpenAI error envelope, which OpenAI SDKs read
// (a problem+json body shows in them as an empty message).
func WriteError(w http.ResponseWriter, status int, typ, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(ErrorEnvelope{ErrorBody{Message: message, Type: typ, Code: code}})
}
