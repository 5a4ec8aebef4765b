package modelclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/modelclient"
	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/gatewaytest"
	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/internal/problem"
)

// A call the gateway refuses for spend is not retried: the client returns
// a StopError with the reason spend_limit.
func TestSpendLimitIsAStopNotARetry(t *testing.T) {
	// The gateway's refusal past a spend limit.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, http.StatusPaymentRequired, "insufficient_quota", openai.CodeSpendLimit, "the daily spend limit is reached")
	}))
	defer srv.Close()
	_, err := modelclient.New(srv.URL+gatewayapi.Prefix, func() string { return "t" }).Stream(context.Background(),
		durable.ModelRequest{Model: "fake/echo", Messages: []durable.Message{{Role: "user", Content: "hi"}}}, nil)
	var stop *durable.StopError
	if !errors.As(err, &stop) || stop.Reason != openai.CodeSpendLimit || durable.IsTransient(err) {
		t.Fatalf("err %v, want a StopError with reason spend_limit", err)
	}
}

// The token is read at each call: the manager claims the sandbox, and
// rotates its token, while the agent runs.
func TestTokenIsReadAtEachCall(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	token := "first"
	c := modelclient.New(srv.URL+gatewayapi.Prefix, func() string { return token })
	for _, tok := range []string{"first", "rotated"} {
		token = tok
		if err := c.Notify(context.Background(), gatewayapi.Notification{Key: "k", Text: "text"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0] != "Bearer first" || got[1] != "Bearer rotated" {
		t.Fatalf("Authorization headers %q", got)
	}
}

// Notifications and wake reports reach the gateway as its contract says
// (the double decodes them strictly, as the manager does).
func TestNotifyAndReportWake(t *testing.T) {
	g := &gatewaytest.Gateway{}
	c := modelclient.New(gatewaytest.Start(t, g), func() string { return "t" })
	due := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	for range 2 {
		if err := c.Notify(context.Background(), gatewayapi.Notification{Key: "reminder-1", Text: "water the plants", DueAt: &due,
			Kind: gatewayapi.KindReminder, Agent: "worker"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.Notifications(); len(n) != 1 || n[0].Key != "reminder-1" || n[0].Text != "water the plants" || !n[0].DueAt.Equal(due) ||
		n[0].Kind != gatewayapi.KindReminder || n[0].Agent != "worker" {
		t.Fatalf("notifications %+v", n)
	}
	var ge *modelclient.GatewayError
	if err := c.Notify(context.Background(), gatewayapi.Notification{Text: "no key", DueAt: &due}); !errors.As(err, &ge) || ge.Status != 400 {
		t.Fatalf("a notification without a key: %v", err)
	}
	if err := c.ReportWake(context.Background(), due); err != nil {
		t.Fatal(err)
	}
	if err := c.ReportWake(context.Background(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if w := g.Wakes(); len(w) != 2 || !w[0].At.Equal(due) || w[1].At != nil {
		t.Fatalf("wake reports %+v", w)
	}
}

// The connector routes as the gateway's contract says: the list is a GET
// naming the agent, a call a POST of ConnectorCallRequest; a refusal is a
// *GatewayError with the manager's problem.
func TestConnectorRoutes(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Authorization"))
		switch r.URL.Path {
		case gatewayapi.Prefix + gatewayapi.ConnectorsPath:
			_ = json.NewEncoder(w).Encode(gatewayapi.ConnectorTools{Tools: []gatewayapi.ConnectorTool{{Name: "mcp__c__t", Mode: "ask", Connector: "c"}}})
		case gatewayapi.Prefix + gatewayapi.ConnectorCall:
			var req gatewayapi.ConnectorCallRequest
			dec := json.NewDecoder(r.Body)
			dec.DisallowUnknownFields()
			if dec.Decode(&req) != nil || req.Agent != "main" || req.Mode != "ask" || string(req.Arguments) != `{"a":1}` {
				problem.Write(w, http.StatusBadRequest, "bad-json", "unexpected call")
				return
			}
			if req.Tool == "mcp__c__off" {
				problem.Write(w, http.StatusForbidden, gatewayapi.ProblemConnectorOff, "the owner has set this tool off")
				return
			}
			_ = json.NewEncoder(w).Encode(gatewayapi.ConnectorResult{Tool: req.Tool, Connector: "c", Text: "answer"})
		}
	}))
	defer srv.Close()
	c := modelclient.New(srv.URL+gatewayapi.Prefix, func() string { return "tok" })
	tools, err := c.ConnectorTools(context.Background(), "main")
	if err != nil || len(tools) != 1 || tools[0].Name != "mcp__c__t" {
		t.Fatalf("tools %+v, %v", tools, err)
	}
	res, err := c.CallConnector(context.Background(), gatewayapi.ConnectorCallRequest{Agent: "main", Tool: "mcp__c__t", Arguments: json.RawMessage(`{"a":1}`), Mode: "ask"})
	if err != nil || res.Text != "answer" {
		t.Fatalf("call %+v, %v", res, err)
	}
	var ge *modelclient.GatewayError
	_, err = c.CallConnector(context.Background(), gatewayapi.ConnectorCallRequest{Agent: "main", Tool: "mcp__c__off", Arguments: json.RawMessage(`{"a":1}`), Mode: "ask"})
	if !errors.As(err, &ge) || ge.Status != 403 || !strings.Contains(err.Error(), "set this tool off") {
		t.Fatalf("off: %v", err)
	}
	if seen[0] != "GET /v1/gateway/connectors?agent=main Bearer tok" || !strings.HasPrefix(seen[1], "POST /v1/gateway/connectors/call ") {
		t.Fatalf("requests %q", seen)
	}
}
