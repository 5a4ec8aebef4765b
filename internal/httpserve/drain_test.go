package httpserve_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/affido/affido/internal/httpserve"
)

// served starts h on a loopback listener and returns the server and its URL.
func served(t *testing.T, h http.Handler) (*http.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserve.New(h, 0)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, "http://" + ln.Addr().String()
}

type answer struct {
	code int
	body string
	err  error
}

func fetch(url string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			out <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- answer{resp.StatusCode, string(b), err}
	}()
	return out
}

// A request in flight when the drain begins finishes with its answer; a
// new connection is refused at once, so a proxy may retry it elsewhere.
func TestDrainFinishesRequestsInFlight(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	srv, url := served(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "done")
	}))
	got := fetch(url)
	<-started
	drained := make(chan error, 1)
	go func() { drained <- httpserve.Drain(10*time.Second, nil, srv) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", url[len("http://"):])
		if err != nil {
			break // refused: the listener is closed
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("new connections were still accepted 5 s into the drain")
		}
		time.Sleep(10 * time.Millisecond) // polling the listener's close
	}
	close(release)
	if a := <-got; a.err != nil || a.code != 200 || a.body != "done" {
		t.Fatalf("the request in flight: %+v", a)
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// At the bound, handoff tells waiting requests to answer; they get
// HandoffGrace to send it, and a request that ignores it is cut off.
func TestDrainHandsOffThenCutsOff(t *testing.T) {
	handedOff, arrived := make(chan struct{}), make(chan struct{}, 2)
	srv, url := served(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		if r.URL.Path == "/stuck" {
			<-r.Context().Done()
			return
		}
		<-handedOff
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	waiting, stuck := fetch(url+"/wait"), fetch(url+"/stuck")
	<-arrived
	<-arrived
	start := time.Now()
	err := httpserve.Drain(300*time.Millisecond, func() { close(handedOff) }, srv)
	took := time.Since(start)
	if err == nil {
		t.Error("drain reported nothing cut off")
	}
	if took > 300*time.Millisecond+httpserve.HandoffGrace+time.Second {
		t.Errorf("drain took %v", took)
	}
	if a := <-waiting; a.err != nil || a.code != http.StatusServiceUnavailable {
		t.Errorf("the handed-off request: %+v", a)
	}
	if a := <-stuck; a.err == nil {
		t.Errorf("the stuck request got an answer: %+v", a)
	}
}
