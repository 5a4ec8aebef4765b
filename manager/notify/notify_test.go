package notify

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/registry"
)

type try struct {
	id     int64
	n      int
	code   int
	status string
}

type fakeStore struct {
	mu    sync.Mutex
	due   []registry.Notification
	tries []try
}

func (f *fakeStore) DueNotifications(context.Context, int) ([]registry.Notification, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.due
	f.due = nil
	return out, nil
}

func (f *fakeStore) RecordNotificationTry(_ context.Context, id int64, n, code int, _ string, status string, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries = append(f.tries, try{id, n, code, status})
	return nil
}

func deliverer(st Store) *Deliverer {
	// The test servers listen on 127.0.0.1: the operator allows exactly that.
	client := outbound.NewClient(outbound.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	d := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), client)
	d.Backoff = func(int) time.Duration { return time.Millisecond }
	return d
}

// inwardServer serves h on 127.0.0.2 (over TLS with tls), an address the
// guard refuses as it would the admin API or Caddy's control listener;
// the test is skipped where that address cannot be had.
func inwardServer(t *testing.T, tls bool, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("listen on 127.0.0.2: %v", err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

func TestDeliveredOnceWithTitleAndKey(t *testing.T) {
	var got []*http.Request
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, bodies = append(got, r), append(bodies, string(b))
	}))
	defer srv.Close()
	st := &fakeStore{}
	d := deliverer(st)
	due := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	d.deliver(context.Background(), registry.Notification{ID: 7, UserID: "u", Key: "reminder-9", Text: "stretch", DueAt: &due, URL: srv.URL + "/topic"})
	if len(got) != 1 || bodies[0] != "stretch" || got[0].Header.Get("Title") == "" || got[0].Header.Get("X-Affido-Notification") != "reminder-9" ||
		got[0].Header.Get("X-Affido-Due") != "2026-12-01T15:00:00Z" {
		t.Fatalf("requests %v bodies %v", got, bodies)
	}
	if len(st.tries) != 1 || st.tries[0] != (try{7, 1, 200, "delivered"}) {
		t.Fatalf("tries %+v", st.tries)
	}
}

func TestFailingEndpointGetsFiveRecordedTries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", 500) }))
	defer srv.Close()
	st := &fakeStore{}
	d := deliverer(st)
	n := registry.Notification{ID: 1, UserID: "u", Key: "k", Text: "t", URL: srv.URL}
	for i := range MaxTries {
		n.Tries = i
		d.deliver(context.Background(), n)
	}
	if len(st.tries) != MaxTries {
		t.Fatalf("%d tries", len(st.tries))
	}
	for i, tr := range st.tries {
		want := "pending"
		if i == MaxTries-1 {
			want = "failed"
		}
		if tr.n != i+1 || tr.code != 500 || tr.status != want {
			t.Fatalf("try %d: %+v, want status %s", i+1, tr, want)
		}
	}
}

func TestNoEndpointIsRecorded(t *testing.T) {
	st := &fakeStore{}
	deliverer(st).deliver(context.Background(), registry.Notification{ID: 3, Key: "k", Text: "t"})
	if len(st.tries) != 1 || st.tries[0].status != "no_endpoint" {
		t.Fatalf("tries %+v", st.tries)
	}
}

func TestRunDeliversWhenKicked(t *testing.T) {
	hits := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits <- struct{}{} }))
	defer srv.Close()
	st := &fakeStore{due: []registry.Notification{{ID: 1, Key: "k", Text: "t", URL: srv.URL}}}
	d := deliverer(st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	d.Kick()
	select {
	case <-hits:
	case <-time.After(3 * time.Second):
		t.Fatal("not delivered after a kick")
	}
}

// A notification endpoint that redirects to an address the guard refuses
// (here another loopback address, as the admin API or Caddy's control
// listener would be) gets nothing delivered there: every try fails.
func TestRedirectInwardIsRefused(t *testing.T) {
	var innerHits atomic.Int64
	inner := inwardServer(t, false, func(w http.ResponseWriter, r *http.Request) { innerHits.Add(1) })
	outer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+"/admin/session?user=victim&token=chosen", http.StatusTemporaryRedirect)
	}))
	defer outer.Close()
	st := &fakeStore{}
	d := deliverer(st)
	for try := 0; try < MaxTries; try++ {
		d.deliver(context.Background(), registry.Notification{ID: 1, UserID: "u", Key: "k", Text: "x", URL: outer.URL, Tries: try})
	}
	if innerHits.Load() != 0 {
		t.Fatal("the redirect target was reached")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if n := len(st.tries); n != MaxTries || st.tries[n-1].status != "failed" {
		t.Fatalf("tries %+v, want %d ending failed", st.tries, MaxTries)
	}
}

// One user's endpoint that hangs does not hold up another user's
// notification: deliveries run in parallel, and the hanging one is not
// picked up a second time while it is in flight.
func TestSlowEndpointDoesNotDelayOthers(t *testing.T) {
	release := make(chan struct{})
	var slowHits atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowHits.Add(1)
		<-release
	}))
	defer slow.Close()
	defer close(release)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer fast.Close()
	st := &fakeStore{due: []registry.Notification{
		{ID: 1, UserID: "slow", Key: "k1", Text: "x", URL: slow.URL},
		{ID: 2, UserID: "fast", Key: "k2", Text: "y", URL: fast.URL},
	}}
	d := deliverer(st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	d.Kick()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st.mu.Lock()
		var got []try
		got = append(got, st.tries...)
		st.mu.Unlock()
		if len(got) == 1 && got[0].id == 2 && got[0].status == "delivered" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fast user's notification waited behind the slow one: tries %+v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A notification in flight is not claimed a second time until released.
	if d.claim(1) {
		t.Fatal("the hanging notification was claimed again while in flight")
	}
}

func TestClaimIsExclusiveUntilReleased(t *testing.T) {
	d := deliverer(&fakeStore{})
	if !d.claim(7) || d.claim(7) {
		t.Fatal("a second claim of the same notification succeeded")
	}
	d.release(7)
	if !d.claim(7) {
		t.Fatal("a released notification could not be claimed again")
	}
}
