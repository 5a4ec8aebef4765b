package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/affido/affido/agent/durable"
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
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after int64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		q.Set("after", v)
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			problem.Write(w, http.StatusBadRequest, "bad-after", "after (or Last-Event-ID) is an entry id")
			return
		}
		after = n
	}
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	conv, err := s.currentConversation(r.Context(), h)
	if v := q.Get("conversation"); v != "" {
		conv, err = strconv.ParseInt(v, 10, 64)
		if err == nil {
			_, err = h.Store().Conversation(r.Context(), conv)
		}
		if err != nil {
			problem.Write(w, http.StatusNotFound, "unknown-conversation", "no such conversation")
			return
		}
	} else if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		problem.Write(w, http.StatusInternalServerError, "no-streaming", "this server cannot stream")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 2000\nevent: hello\ndata: {\"conversation_id\":%d}\n\n", conv)
	fl.Flush()
	beat := time.NewTicker(eventsHeartbeat)
	defer beat.Stop()
	for {
		changed := h.Changed()
		if h.Closed() { // paused meanwhile: reopen, someone is watching
			if h, err = s.storage(r.Context()); err != nil {
				return
			}
			continue
		}
		entries, err := h.Store().EntriesSince(r.Context(), conv, after+1)
		if err != nil && r.Context().Err() == nil && !h.Closed() {
			fmt.Fprintf(w, "event: error\ndata: %q\n\n", err.Error())
			fl.Flush()
			return
		}
		for _, e := range entries {
			if err := writeEntryEvent(w, e); err != nil {
				return
			}
			after = e.ID
		}
		if len(entries) > 0 {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			fl.Flush()
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
