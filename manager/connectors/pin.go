package connectors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Pin is the SHA-256 (hex) of a tool's definition in canonical JSON: the
// object {"description", "inputSchema", "name"} with every object's keys
// sorted, no insignificant space, numbers as float64 would print them.
//
// encoding/json gives that: it writes a map's keys sorted, at every depth,
// and the schema is first decoded into plain maps and slices. This is not
// RFC 8785 (JCS) to the letter (HTML characters are escaped as \u003c and
// the like, and numbers past 2^53 lose digits), but it is deterministic for
// every input, which is all a pin needs: the same definition always has
// the same hash, and any change of name, description or schema (a key, a
// value, an order in an array) changes it. A reordering of an object's keys
// does not.
func Pin(name, description string, inputSchema json.RawMessage) (string, error) {
	var schema any
	if len(inputSchema) > 0 {
		if err := json.Unmarshal(inputSchema, &schema); err != nil {
			return "", fmt.Errorf("input schema of %s: %w", name, err)
		}
	}
	b, err := json.Marshal(map[string]any{"name": name, "description": description, "inputSchema": schema})
	if err != nil {
		return "", fmt.Errorf("definition of %s: %w", name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
