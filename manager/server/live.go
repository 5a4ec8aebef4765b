package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/affido/affido/internal/problem"
)

// The owner's live stream (GET /api/events): every notification handed to
// the manager for a user (an approval waiting, a reminder fired, a spend
// stop) is also sent at once to that user's open pages, across all their
// agents, so a page shows it without a reload. It is a hint to read the
// store again, not a record: a page that was closed reads what it missed
// from the agents' stores when it opens. Watching it does not count as the
// sandbox's activity: it never reaches the sandbox.

// LiveNotice is one event of the owner's live stream.
type LiveNotice struct {
	Kind  string    `json:"kind"`            // approval, reminder, spend, connector or notice (gatewayapi's kinds)
	Agent string    `json:"agent,omitempty"` // the agent it is about, when the sandbox said
	Text  string    `json:"text"`
	At    time.Time `json:"at"`
}

// liveMaxStreams is how many live streams one user may hold open at once.
const liveMaxStreams = 32

// liveHeartbeat is how often an idle live stream sends a comment, and
// checks that its session still holds.
var liveHeartbeat = 15 * time.Second

// liveHub fans notices out to each user's open streams.
type liveHub struct {
	mu    sync.Mutex
	subs  map[string]map[chan LiveNotice]struct{}
	ended chan struct{} // closed when the manager stops: every stream ends
}

// endedCh returns the channel closed by end.
func (h *liveHub) endedCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended == nil {
		h.ended = make(chan struct{})
	}
	return h.ended
}

// end ends every open stream, and any opened later, at once.
func (h *liveHub) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended == nil {
		h.ended = make(chan struct{})
	}
	select {
	case <-h.ended:
	default:
		close(h.ended)
	}
}

// EndStreams ends the owners' live streams: the manager is stopping, and a
// drain need not wait for streams that never finish by themselves. Each
// page reconnects by itself, to the next manager.
func (s *Server) EndStreams() { s.live.end() }

// subscribe adds a stream of user's notices; false when user has too many.
func (h *liveHub) subscribe(user string) (chan LiveNotice, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[string]map[chan LiveNotice]struct{}{}
	}
	if len(h.subs[user]) >= liveMaxStreams {
		return nil, false
	}
	c := make(chan LiveNotice, 16)
	if h.subs[user] == nil {
		h.subs[user] = map[chan LiveNotice]struct{}{}
	}
	h.subs[user][c] = struct{}{}
	return c, true
}

func (h *liveHub) unsubscribe(user string, c chan LiveNotice) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[user], c)
	if len(h.subs[user]) == 0 {
		delete(h.subs, user)
	}
}

// publish sends n to user's open streams; a stream too far behind misses
// it (its page reads the store again on the next one).
func (h *liveHub) publish(user string, n LiveNotice) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs[user] {
		select {
		case c <- n:
		default:
		}
	}
}

// noticeKind is a notification's kind for an agent too old to say it:
// "reminder" for its reminder keys ("reminder-…"), else "notice". It never
// says "spend": only the manager's own spend stop is one.
func noticeKind(key string) string {
	if strings.HasPrefix(key, "reminder-") {
		return "reminder"
	}
	return "notice"
}

// liveEvents streams the owner's notices as server-sent events.
func (s *Server) liveEvents(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return problem.New(http.StatusInternalServerError, "no-streaming", "this server cannot stream")
	}
	c, ok := s.live.subscribe(user)
	if !ok {
		return problem.Errorf(http.StatusTooManyRequests, "too-many-streams", "%d live streams are already open for this user", liveMaxStreams).Retry(30)
	}
	defer s.live.unsubscribe(user, c)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\nevent: hello\ndata: {}\n\n")
	fl.Flush()
	beat := time.NewTicker(liveHeartbeat)
	defer beat.Stop()
	ended := s.live.endedCh()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-ended:
			return nil
		case n := <-c:
			b, _ := json.Marshal(n)
			if _, err := fmt.Fprintf(w, "event: notice\ndata: %s\n\n", b); err != nil {
				return nil
			}
		case <-beat.C:
			// A session signed out or revoked meanwhile ends the stream.
			if owner, _, err := s.authorize(discard{}, r, "", http.MethodGet, r.URL.Path); err != nil || owner != user {
				return nil
			}
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return nil
			}
		}
		fl.Flush()
	}
}

// discard is a ResponseWriter for a check made while a stream is open:
// whatever the check would set on the answer is dropped.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
