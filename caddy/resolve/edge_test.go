package resolve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/affido/affido/internal/edgeapi"
	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/edge"
)

const testKey = "0123456789abcdef0123456789abcdef"

// pair is this Caddy's poll loop against the manager's real Decisions over
// HTTP on loopback.
type pair struct {
	h   *Handler
	dec *edge.Decisions
	srv *httptest.Server
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{dec: edge.New(func(edgeapi.Touch) {})}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var poll edgeapi.Poll
		if r.URL.Path != edgeapi.PollPath || r.Header.Get(sandboxapi.HeaderControlKey) != testKey || json.NewDecoder(r.Body).Decode(&poll) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(p.dec.Poll(poll, r.Context().Done()))
	}))
	t.Cleanup(p.srv.Close)
	p.h = &Handler{manager: strings.TrimPrefix(p.srv.URL, "http://"), key: testKey, id: "test", cache: NewCache(),
		client: &http.Client{}, log: zap.NewNop()}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go p.h.poll(ctx)
	return p
}

// waitLeased waits until the cache holds a lease (a decision put is kept).
func (p *pair) waitLeased(t *testing.T, k Key) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.h.cache.Put(k, Decision{User: "dave", Endpoint: "10.0.0.2:8080", Until: time.Now().Add(time.Minute)}, p.h.cache.Begin())
		if _, ok := p.h.cache.Get(k); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no lease in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestForgetReachesTheCacheBeforeItReturns(t *testing.T) {
	p := newPair(t)
	k := KeyOf("dave", "c", "", false)
	p.waitLeased(t, k)
	for i := range 5 {
		p.dec.Forget("dave")
		if _, ok := p.h.cache.Get(k); ok {
			t.Fatalf("forget %d returned while the cache still answered", i)
		}
		p.waitLeased(t, k)
	}
}

// A manager that stops answering polls: the cache stops answering at once
// (the failed poll ends the lease), so the manager's Forget, which waits
// for the lease it gave, never leaves a stale answer behind.
func TestAManagerGoneEndsTheLease(t *testing.T) {
	p := newPair(t)
	k := KeyOf("dave", "c", "", false)
	p.waitLeased(t, k)
	p.srv.CloseClientConnections()
	p.srv.Close()
	deadline := time.Now().Add(edgeapi.Lease + time.Second)
	for {
		if _, ok := p.h.cache.Get(k); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache answered past the lease with its manager gone")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
