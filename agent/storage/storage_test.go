package storage_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres/pgtest"
	"github.com/affido/affido/agent/storage"
	"github.com/affido/affido/internal/gatewayapi"
)

// gateway plays the manager's two storage routes over the test Postgres:
// the credential is its DSN's role and database, and the tunnel splices
// to its server. It counts credential asks and tunnels, and answers 401
// to any other token than token.
type gateway struct {
	*httptest.Server
	asks, tunnels atomic.Int32
}

func newGateway(t *testing.T, token string) *gateway {
	dsn := pgtest.DSN(t)
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{}
	mux := http.NewServeMux()
	auth := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"title":"gateway-auth"}`, http.StatusUnauthorized)
			return false
		}
		return true
	}
	mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.StoragePath, func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		g.asks.Add(1)
		json.NewEncoder(w).Encode(gatewayapi.StorageCredential{Role: cfg.User, Database: cfg.Database, Password: "unused"})
	})
	mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.StorageConnectPath, func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		g.tunnels.Add(1)
		network, addr := "tcp", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
		if strings.HasPrefix(cfg.Host, "/") {
			network, addr = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
		}
		server, err := net.Dial(network, addr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer server.Close()
		client, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer client.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + gatewayapi.StorageUpgrade + "\r\n\r\n")
		buf.Flush()
		done := make(chan struct{}, 2)
		go func() { io.Copy(server, buf.Reader); done <- struct{}{} }()
		go func() { io.Copy(client, server); done <- struct{}{} }()
		<-done
	})
	g.Server = httptest.NewServer(mux)
	t.Cleanup(g.Close)
	return g
}

func superuser(t *testing.T) *pgx.Conn {
	conn, err := pgx.Connect(t.Context(), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// The agent's storage through the gateway: the first open asks for the
// credential once, makes and migrates the agent's schema through the
// tunnel and holds its lease; a commit lands; Remove drops the schema and
// everything in it.
func TestOpenThroughTheTunnelAndRemove(t *testing.T) {
	g := newGateway(t, "tok")
	su := superuser(t)
	a := agents.Agent{Name: "helper", ID: agentID()}
	p := storage.New(g.URL+gatewayapi.Prefix, func() string { return "tok" })
	db, err := p.Open(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	store, err := durable.OpenStore(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	id, err := store.MintID()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Commit(t.Context(), durable.Writes{Entries: []durable.Entry{{ID: id, ConversationID: durable.RootConversation,
		Kind: durable.OwnerMessage, Text: "through the tunnel"}}}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := su.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{storage.Schema(a)}.Sanitize()+`.entries WHERE record LIKE '%through the tunnel%'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the commit in the agent's schema: %d rows, %v", n, err)
	}
	if g.asks.Load() != 1 || g.tunnels.Load() < 1 {
		t.Fatalf("asks %d, tunnels %d: want the credential asked once and every connection tunnelled", g.asks.Load(), g.tunnels.Load())
	}
	store.Close()
	if err := p.Remove(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := su.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, storage.Schema(a)).Scan(&exists); err != nil || exists {
		t.Fatalf("after Remove the schema exists: %v %v", exists, err)
	}
	if g.asks.Load() != 1 {
		t.Fatalf("the credential was asked %d times, want once per process", g.asks.Load())
	}
}

// Before the claim there is no token, and a token the gateway refuses
// opens nothing: both are errors, and nothing is made.
func TestNoTokenOpensNothing(t *testing.T) {
	g := newGateway(t, "tok")
	a := agents.Agent{Name: "main", ID: agentID()}
	if _, err := storage.New(g.URL+gatewayapi.Prefix, func() string { return "" }).Open(t.Context(), a); !errors.Is(err, storage.ErrNoToken) {
		t.Fatalf("open before the claim: %v, want ErrNoToken", err)
	}
	_, err := storage.New(g.URL+gatewayapi.Prefix, func() string { return "stolen" }).Open(t.Context(), a)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("open with a refused token: %v, want the gateway's 401", err)
	}
	if g.tunnels.Load() != 0 {
		t.Fatalf("%d tunnels opened without a good token", g.tunnels.Load())
	}
	var exists bool
	if err := superuser(t).QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, storage.Schema(a)).Scan(&exists); err != nil || exists {
		t.Fatalf("a schema was made without a good token: %v %v", exists, err)
	}
}

// agentID is a fresh agent id, so runs never share a schema.
func agentID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}
