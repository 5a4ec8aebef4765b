package server

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/internal/problem"
)

// Routing: /agents/<name>/<route> is <route> for that agent; the routes
// without it mean main.

type agentKey struct{}

// agentOf is the agent a request is for.
func agentOf(r *http.Request) string {
	if name, ok := r.Context().Value(agentKey{}).(string); ok {
		return name
	}
	return agents.Main
}

// perAgent are the first path segments of the routes each agent has.
var perAgent = map[string]bool{"session": true, "sessions": true, "models": true, "reminders": true, "reset": true,
	"inspect": true, "entry": true, "prompt": true, "corpus": true, "events": true, "approvals": true,
	"rules": true, "jobs": true, "runs": true, "search": true, "activity": true}

// ownAgentRoutes are routes under /agents/<name>/ that are not an agent's
// copy of a sandbox route: /notes means the owner's notes, and an agent's
// work notes are /agents/<name>/notes.
var ownAgentRoutes = map[string]bool{"notes": true}

// byAgent rewrites /agents/<name>/<route> to <route> for agent <name>.
func (s *Server) byAgent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/agents/")
		name, route, nested := strings.Cut(rest, "/")
		if !ok || !nested {
			next.ServeHTTP(w, r)
			return
		}
		first, _, _ := strings.Cut(route, "/")
		if ownAgentRoutes[route] {
			next.ServeHTTP(w, r) // the mux serves /agents/{name}/<route> itself
			return
		}
		if !perAgent[first] {
			s.fail(w, r, problem.Errorf(http.StatusNotFound, "not-found", "no route /agents/%s/%s: an agent has %s", name, route, perAgentList()))
			return
		}
		if !agents.ValidName(name) {
			s.fail(w, r, problem.Errorf(http.StatusNotFound, "unknown-agent", "no agent %q", name))
			return
		}
		r2 := r.Clone(context.WithValue(r.Context(), agentKey{}, name))
		r2.URL.Path, r2.URL.RawPath = "/"+route, ""
		next.ServeHTTP(w, r2)
	})
}

func perAgentList() string {
	var l []string
	for k := range perAgent {
		l = append(l, "/"+k)
	}
	slices.Sort(l)
	return strings.Join(l, ", ")
}

// The agent routes.

func (s *Server) agentsList(w http.ResponseWriter, r *http.Request) error {
	list, err := s.host.Agents(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": list, "max_hops": agents.MaxHops})
	return nil
}

func (s *Server) agentGet(w http.ResponseWriter, r *http.Request) error {
	a, err := s.host.Agent(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

func (s *Server) agentCreate(w http.ResponseWriter, r *http.Request) error {
	var body agents.Spec
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if err := s.knownModel(r, body.Model); err != nil {
		return err
	}
	a, err := s.host.CreateAgent(r.Context(), body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, a)
	return nil
}

// agentUpdate renames an agent, sets its model or whom it may message
// (host.UpdateAgent).
func (s *Server) agentUpdate(w http.ResponseWriter, r *http.Request) error {
	var p agents.Patch
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if p.Model != nil {
		if err := s.knownModel(r, *p.Model); err != nil {
			return err
		}
	}
	a, err := s.host.UpdateAgent(r.Context(), r.PathValue("name"), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// agentDelete deletes an agent and its storage; main's trace keeps the
// entry recording it.
func (s *Server) agentDelete(w http.ResponseWriter, r *http.Request) error {
	a, err := s.host.DeleteAgent(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": a.Name})
	return nil
}
