package main

import (
	"encoding/json"
	"net/http"

	"github.com/affido/affido/manager/connectors/connectorstest"
)

// mcpSecret is the header secret the test MCP server wants (X-Mcp-Key);
// e2e-test/connectors_test.go gives it to the manager and looks for it in
// the sandbox, where it must never be.
const mcpSecret = "e2e-mcp-secret-9c41d7a2f0b35e68"

// mcpServe serves the test MCP server (manager/connectors/connectorstest:
// the official SDK's server side, streamable HTTP) at /mcp on addr, next
// to the sink. POST /control/describe {"tool","description"} changes a
// tool's description, as a server changing under its users would; the
// test reaches it from inside this container (docker exec … -post).
func mcpServe(addr string) {
	s := connectorstest.NewServer()
	s.Header, s.Secret = "X-Mcp-Key", mcpSecret
	mux := http.NewServeMux()
	mux.Handle("/mcp", s)
	mux.HandleFunc("POST /control/describe", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Tool, Description string }
		if json.NewDecoder(r.Body).Decode(&body) != nil || body.Tool == "" {
			http.Error(w, "send {tool, description}", http.StatusBadRequest)
			return
		}
		s.SetDescription(body.Tool, body.Description)
		w.WriteHeader(http.StatusNoContent)
	})
	http.ListenAndServe(addr, mux)
}
