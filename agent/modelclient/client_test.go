package modelclient_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/modelclient"
	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/manager/gateway"
	"github.com/affido/affido/manager/spend"
)

// A call the gateway refuses for spend is not retried: the client returns
// a StopError with the reason spend_limit.
func TestSpendLimitIsAStopNotARetry(t *testing.T) {
	mux := http.NewServeMux()
	(&gateway.Handler{Caller: func(*http.Request) (string, int, string) { return "u", 0, "" },
		Provider: gateway.FakeProvider(gateway.NewFake([]string{"fake/echo"})), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Prices: map[string]spend.Price{"fake/echo": {Input: 1, Output: 2}}, Ledger: &spend.Memory{}, Limits: spend.Limits{}}).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, err := modelclient.New(srv.URL+"/v1/gateway", func() string { return "t" }).Stream(context.Background(),
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
	c := modelclient.New(srv.URL+"/v1/gateway", func() string { return token })
	for _, tok := range []string{"first", "rotated"} {
		token = tok
		if err := c.Notify(context.Background(), "k", "text", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0] != "Bearer first" || got[1] != "Bearer rotated" {
		t.Fatalf("Authorization headers %q", got)
	}
}
