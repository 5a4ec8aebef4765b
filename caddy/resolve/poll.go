package resolve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/affido/affido/internal/edgeapi"
	"github.com/affido/affido/internal/sandboxapi"
)

// poll keeps polling the manager (edgeapi) until ctx ends: each answer's
// forgets are applied before its lease. A poll that fails ends the lease at
// once, gives its touches back and is tried again after a pause that grows
// to 5 s (a manager with the cache off answers 404: no lease, every request
// asks it).
func (h *Handler) poll(ctx context.Context) {
	pause, failing := time.Duration(0), false
	for {
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		p := h.cache.Poll(h.id)
		sent := time.Now()
		a, err := h.pollOnce(ctx, p)
		if err != nil {
			h.cache.Untouch(p.Touched)
			h.cache.Lapse()
			if !failing && ctx.Err() == nil {
				h.log.Info("the manager's decision leases stopped; every request asks it", zap.Error(err))
			}
			failing = true
			pause = min(max(2*pause, 250*time.Millisecond), 5*time.Second)
			continue
		}
		if failing {
			h.log.Info("the manager's decision leases resumed")
		}
		failing, pause = false, 0
		h.cache.Apply(a, sent)
	}
}

// pollOnce sends p and reads the answer.
func (h *Handler) pollOnce(ctx context.Context, p edgeapi.Poll) (edgeapi.Answer, error) {
	var a edgeapi.Answer
	body, err := json.Marshal(p)
	if err != nil {
		return a, err
	}
	ctx, cancel := context.WithTimeout(ctx, edgeapi.Hold+5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.manager+edgeapi.PollPath, bytes.NewReader(body))
	if err != nil {
		return a, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sandboxapi.HeaderControlKey, h.key)
	resp, err := h.client.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return a, fmt.Errorf("poll: %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&a); err != nil {
		return a, fmt.Errorf("poll: %w", err)
	}
	if a.Epoch == "" || a.LeaseMS <= 0 {
		return a, fmt.Errorf("poll: an answer without epoch or lease")
	}
	return a, nil
}
