// Package profiling serves a process's Go profiles over a window of time,
// for `affido bench --profile`: CPU, allocations, blocking, mutex contention
// and an execution trace. The manager mounts it on its admin socket, Caddy
// on its control listener behind the control key; neither puts it where a
// sandbox or a client can reach it.
//
// Block and mutex sampling costs something on every contended operation,
// so it is off in normal running and switched on only while a window of
// either kind is open.
package profiling

import (
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"
	"sync"
)

// Kinds are the profiles Handler serves, by the last element of the path.
var Kinds = []string{"cpu", "allocs", "block", "mutex", "trace"}

// MaxSeconds bounds a window.
const MaxSeconds = 120

// BlockRate and MutexFraction are the sampling rates while a window is
// open: a blocking event of 10 µs or more, one contention event in 10.
const (
	BlockRate     = 10_000
	MutexFraction = 10
)

// Handler serves GET /<kind>?seconds=N (1 to MaxSeconds) for each of Kinds:
// the CPU profile or the trace taken over the next N seconds, or the
// allocations, blocking or contention that happened in them (a delta). The
// answer is the pprof (or trace) file.
//
// Importing net/http/pprof also registers it on http.DefaultServeMux;
// no Affido server serves that mux.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cpu", window(pprof.Profile))
	mux.HandleFunc("GET /trace", window(pprof.Trace))
	mux.HandleFunc("GET /allocs", window(pprof.Handler("allocs").ServeHTTP))
	mux.HandleFunc("GET /block", window(sampling(&blockWindows, pprof.Handler("block").ServeHTTP)))
	mux.HandleFunc("GET /mutex", window(sampling(&mutexWindows, pprof.Handler("mutex").ServeHTTP)))
	return mux
}

// window checks the seconds parameter every kind needs (the pprof handlers
// would take a missing one as "since the start" or "30 s").
func window(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("seconds"))
		if err != nil || n < 1 || n > MaxSeconds {
			http.Error(w, "seconds must be 1 to "+strconv.Itoa(MaxSeconds), http.StatusBadRequest)
			return
		}
		h(w, r)
	}
}

// rateWindows switches a sampling rate on while at least one window is open.
type rateWindows struct {
	mu   sync.Mutex
	open int
	set  func(on bool)
}

var (
	blockWindows = rateWindows{set: func(on bool) {
		if on {
			runtime.SetBlockProfileRate(BlockRate)
		} else {
			runtime.SetBlockProfileRate(0)
		}
	}}
	mutexWindows = rateWindows{set: func(on bool) {
		if on {
			runtime.SetMutexProfileFraction(MutexFraction)
		} else {
			runtime.SetMutexProfileFraction(0)
		}
	}}
)

func (rw *rateWindows) add(d int) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.open += d
	switch {
	case d > 0 && rw.open == 1:
		rw.set(true)
	case d < 0 && rw.open == 0:
		rw.set(false)
	}
}

// sampling opens a window of rw around h.
func sampling(rw *rateWindows, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rw.add(1)
		defer rw.add(-1)
		h(w, r)
	}
}
