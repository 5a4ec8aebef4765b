package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/host"
	"github.com/affido/affido/internal/problem"
)

// eventsHeartbeat is how often an idle stream sends a comment, so proxies
// and the page both see the connection is alive.
const eventsHeartbeat = 15 * time.Second

// events streams what changed in a conversation as server-sent events:
// every entry after Last-Event-ID (or ?after=), oldest first, each as
// "event: entry" with the stored entry as data and its ID as the event ID,
// so a reconnecting EventSource resumes exactly where it stopped. The page
// renders from the store; the stream only tells it what is new. While the
// stream is open the agent counts a request in flight, so the manager does
// not pause a sandbox someone is watching.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var after int64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		q.Set("after", v)
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return problem.New(http.StatusBadRequest, "bad-after", "after (or Last-Event-ID) is an entry id")
		}
		after = n
	}
	rt, err := s.runtime(r)
	if err != nil {
		return err
	}
	h := rt.Harness
	conv, err := host.CurrentConversation(r.Context(), h)
	if v := q.Get("conversation"); v != "" {
		conv, err = strconv.ParseInt(v, 10, 64)
		if err == nil {
			_, err = h.Store().Conversation(r.Context(), conv)
		}
		if err != nil {
			return problem.New(http.StatusNotFound, "unknown-conversation", "no such conversation")
		}
	} else if err != nil {
		return err
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return problem.New(http.StatusInternalServerError, "no-streaming", "this server cannot stream")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 2000\nevent: hello\ndata: {\"conversation_id\":%d}\n\n", conv)
	fl.Flush()
	beat := time.NewTicker(eventsHeartbeat)
	defer beat.Stop()
	deltas, unsubscribe := s.host.Subscribe(rt.Agent.ID, conv)
	defer unsubscribe()
	sendDelta := func(d host.Delta) error {
		b, _ := json.Marshal(d)
		_, err := fmt.Fprintf(w, "event: delta\ndata: %s\n\n", b)
		return err
	}
	changed := h.Changed()
	for {
		if h.Closed() { // paused meanwhile: reopen, someone is watching
			if rt, err = s.host.Runtime(r.Context(), agentOf(r)); err != nil {
				return nil
			}
			h = rt.Harness
			changed = h.Changed()
			continue
		}
		// A reply's deltas are all queued before its entry is committed:
		// send them first, so the stored reply comes after its pieces.
		for drained := false; !drained; {
			select {
			case d := <-deltas:
				if err := sendDelta(d); err != nil {
					return nil
				}
			default:
				drained = true
			}
		}
		entries, err := h.Store().EntriesSince(r.Context(), conv, after+1)
		if err != nil && r.Context().Err() == nil && !h.Closed() {
			// The headers are sent: the stream ends with the request id of the failure.
			id := problem.NewRequestID()
			s.cfg.Log.Error("events: read entries", "request_id", id, "err", err)
			fmt.Fprintf(w, "event: error\ndata: %q\n\n", "the entries could not be read; request id "+id)
			fl.Flush()
			return nil
		}
		for _, e := range entries {
			if err := writeEntryEvent(w, e); err != nil {
				return nil
			}
			after = e.ID
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return nil
		case d := <-deltas:
			if err := sendDelta(d); err != nil {
				return nil
			}
		case <-changed:
			changed = h.Changed()
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return nil
			}
		}
	}
}

func writeEntryEvent(w http.ResponseWriter, e durable.Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %d\nevent: entry\ndata: %s\n\n", e.ID, b)
	return err
}
