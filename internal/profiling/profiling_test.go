package profiling

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
)

func TestHandlerServesEveryKindOverAWindow(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	for _, kind := range Kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL + "/" + kind + "?seconds=1")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || len(b) == 0 {
				t.Errorf("%s: %d, %d bytes: %.200s", kind, resp.StatusCode, len(b), b)
			}
		}()
	}
	wg.Wait()
}

func TestHandlerRefuses(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/cpu", http.StatusBadRequest}, // no window: pprof would take 30 s
		{"GET", "/allocs", http.StatusBadRequest},
		{"GET", "/block?seconds=0", http.StatusBadRequest},
		{"GET", "/trace?seconds=121", http.StatusBadRequest},
		{"GET", "/goroutine?seconds=1", http.StatusNotFound},
		{"GET", "/cmdline", http.StatusNotFound},
		{"POST", "/cpu?seconds=1", http.StatusMethodNotAllowed},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
}

// Sampling is on exactly while at least one window is open.
func TestRateWindowsOverlap(t *testing.T) {
	var got []bool
	rw := rateWindows{set: func(on bool) { got = append(got, on) }}
	rw.add(1)
	rw.add(1)
	rw.add(-1)
	if !reflect.DeepEqual(got, []bool{true}) {
		t.Fatalf("after one of two windows closed: %v", got)
	}
	rw.add(-1)
	rw.add(1)
	rw.add(-1)
	if !reflect.DeepEqual(got, []bool{true, false, true, false}) {
		t.Fatalf("got %v", got)
	}
}
