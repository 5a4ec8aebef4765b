package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/connectors"
	"github.com/affido/affido/manager/registry"
)

// ConnectorKeyPrefix begins the keys of the manager's connector notices;
// the gateway refuses it from a sandbox.
const ConnectorKeyPrefix = "connector-"

// connectorGatewayRoutes are what an agent reaches through the gateway:
// the tools it may call, and a call.
func (s *Server) connectorGatewayRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.ConnectorsPath, s.serve(s.offerConnectorTools))
	mux.HandleFunc("POST "+gatewayapi.Prefix+gatewayapi.ConnectorCall, s.serve(s.callConnectorTool))
}

// connectorOwnerRoutes are the owner's: add, list, refresh, set a tool's
// mode, remove. The secret is never in an answer.
func (s *Server) connectorOwnerRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/connectors", s.serve(s.listConnectors))
	mux.HandleFunc("POST /api/connectors", s.serve(s.addConnector))
	mux.HandleFunc("POST /api/connectors/{id}/refresh", s.serve(s.refreshConnector))
	mux.HandleFunc("PUT /api/connectors/{id}/tools/{tool}", s.serve(s.setConnectorTool))
	mux.HandleFunc("DELETE /api/connectors/{id}", s.serve(s.removeConnector))
}

func (s *Server) offerConnectorTools(w http.ResponseWriter, r *http.Request) error {
	user, status, why := s.caller(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	agent := r.URL.Query().Get("agent")
	if !connectors.ValidAgent(agent) {
		return problem.New(http.StatusBadRequest, "bad-agent", "agent must be an agent's name")
	}
	offered, err := s.Connectors.Offer(r.Context(), user, agent)
	if err != nil {
		return registryDown(err)
	}
	out := gatewayapi.ConnectorTools{Tools: []gatewayapi.ConnectorTool{}}
	for _, o := range offered {
		out.Tools = append(out.Tools, gatewayapi.ConnectorTool{Name: o.Name, Description: o.Description, InputSchema: o.InputSchema,
			Mode: string(o.Mode), Connector: o.Connector})
	}
	writeJSONStatus(w, http.StatusOK, out)
	return nil
}

func (s *Server) callConnectorTool(w http.ResponseWriter, r *http.Request) error {
	user, status, why := s.caller(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	var body gatewayapi.ConnectorCallRequest
	if err := decodeStrict(w, r, 256<<10, &body); err != nil {
		return problem.New(http.StatusBadRequest, "bad-json", "send {agent, tool, arguments, mode} as JSON (at most 256 KiB)")
	}
	res, err := s.Connectors.Call(r.Context(), user, body.Agent, body.Tool, body.Arguments, connectors.Mode(body.Mode))
	if err != nil {
		s.Log.Info("gateway: connector call refused or failed", "user", user, "agent", body.Agent, "tool", body.Tool, "err", err)
		return connectorProblem(err)
	}
	sum := sha256.Sum256([]byte(res.Text))
	c, _, _ := connectors.SplitToolName(body.Tool)
	writeJSONStatus(w, http.StatusOK, gatewayapi.ConnectorResult{Tool: body.Tool, Connector: c, Text: res.Text, IsError: res.IsError,
		Truncated: res.Truncated, SHA256: hex.EncodeToString(sum[:]), CalledAt: time.Now().UTC()})
	return nil
}

// connectorProblem is the answer to a connector operation's error: the
// package's errors are the manager's own words (a server's never pass
// through them); anything else is the registry failing.
func connectorProblem(err error) error {
	if p := problemOf(err); p != nil {
		return p
	}
	return registryDown(err)
}

func (s *Server) connectorID(w http.ResponseWriter, r *http.Request) (string, int64, error) {
	user, err := s.owner(w, r)
	if err != nil {
		return "", 0, err
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return "", 0, problem.New(http.StatusNotFound, "connector-not-found", "no such connector")
	}
	return user, id, nil
}

func (s *Server) listConnectors(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	agent := r.URL.Query().Get("agent")
	if agent != "" && !connectors.ValidAgent(agent) {
		return problem.New(http.StatusBadRequest, "bad-agent", "agent must be an agent's name")
	}
	list, err := s.Connectors.Store.Connectors(r.Context(), user, agent)
	if err != nil {
		return registryDown(err)
	}
	writeJSONStatus(w, http.StatusOK, map[string]any{"connectors": list})
	return nil
}

func (s *Server) addConnector(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	var body connectors.NewConnector
	if err := decodeStrict(w, r, 16<<10, &body); err != nil {
		return problem.New(http.StatusBadRequest, "bad-json", `send {"agent", "name", "url", "header_name", "secret"} as JSON (the last two optional, together)`)
	}
	c, err := s.Connectors.Add(r.Context(), user, body)
	if err != nil {
		return connectorProblem(err)
	}
	writeJSONStatus(w, http.StatusCreated, c)
	return nil
}

func (s *Server) refreshConnector(w http.ResponseWriter, r *http.Request) error {
	user, id, err := s.connectorID(w, r)
	if err != nil {
		return err
	}
	c, err := s.Connectors.Refresh(r.Context(), user, id)
	if err != nil {
		return connectorProblem(err)
	}
	writeJSONStatus(w, http.StatusOK, c)
	return nil
}

func (s *Server) setConnectorTool(w http.ResponseWriter, r *http.Request) error {
	user, id, err := s.connectorID(w, r)
	if err != nil {
		return err
	}
	var body struct {
		Mode connectors.Mode `json:"mode"`
	}
	if err := decodeStrict(w, r, 1<<10, &body); err != nil {
		return problem.New(http.StatusBadRequest, "bad-json", `send {"mode": "off" | "ask" | "allow"}`)
	}
	c, err := s.Connectors.SetMode(r.Context(), user, id, r.PathValue("tool"), body.Mode)
	if err != nil {
		return connectorProblem(err)
	}
	writeJSONStatus(w, http.StatusOK, c)
	return nil
}

func (s *Server) removeConnector(w http.ResponseWriter, r *http.Request) error {
	user, id, err := s.connectorID(w, r)
	if err != nil {
		return err
	}
	if err := s.Connectors.Remove(r.Context(), user, id); err != nil {
		return connectorProblem(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ConnectorNotice tells the owner a connector's tool turned off (the
// connectors.Service's Notify): through the notification path, once per
// change, and on the live stream.
func (s *Server) ConnectorNotice(ctx context.Context, n connectors.Notice) {
	if s.Notifications == nil {
		return
	}
	s.tellOwner(ctx, n.User, registry.Notification{Key: ConnectorKeyPrefix + n.Key, Text: n.Text, Kind: gatewayapi.KindConnector, Agent: n.Agent})
}
