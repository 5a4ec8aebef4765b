package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/spend"
)

// Web tools as the ledger names them (its "model" column) and the limits'
// refusals say.
const (
	ToolFetch  = "fetch_url"
	ToolSearch = "web_search"
)

// charge admits one call of tool for user before it goes out, or answers
// the refusal itself (ok false): first the rate (429 with Retry-After),
// then the spend limits (402), the price reserved on the same ledger as
// model calls. The caller defers settle: it charges the price whatever
// came back (a failed or abandoned call went out all the same), under its
// own context, so a sandbox that hangs up mid-call does not skip it.
func (h *Web) charge(w http.ResponseWriter, r *http.Request, user, tool string) (settle func(), ok bool) {
	none := func() {}
	if wait, ok := h.rate.admit(user, h.now()); !ok {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		problem.Write(w, http.StatusTooManyRequests, gatewayapi.ProblemWebRate,
			fmt.Sprintf("rate limit: web calls (web_search and fetch_url together) are limited to %d a minute per user; this %s may go in %d s", h.PerMinute, tool, secs))
		return none, false
	}
	price := h.Prices.Fetch
	if tool == ToolSearch {
		price = h.Prices.Search
	}
	if h.Ledger == nil || price == 0 {
		return none, true
	}
	id, perr := Reserve(r.Context(), h.Ledger, h.Limits, user, tool, price, fmt.Sprintf("this %s costs %s", tool, spend.Dollars(price)))
	if perr != nil {
		if perr.Status == http.StatusPaymentRequired && h.OnLimit != nil {
			h.OnLimit(user)
		}
		problem.Respond(w, r, h.Log, perr) // a ledger that failed is logged there
		return none, false
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.Ledger.Settle(ctx, id, price); err != nil {
			h.Log.Warn("gateway: spend not settled (the reservation stands)", "user", user, "id", id, "err", err)
		}
	}, true
}

// Reserve reserves micros for a call of what (the ledger's name for it)
// by user, or returns the problem refusing it: the spend limits (402,
// saying call: what this one costs), or a ledger that does not answer
// (503, its error the problem's cause).
func Reserve(ctx context.Context, l spend.Ledger, lim spend.Limits, user, what string, micros int64, call string) (int64, *problem.Error) {
	id, err := l.Reserve(ctx, user, what, micros, lim)
	switch {
	case errors.Is(err, spend.ErrLimit):
		detail := err.Error()
		var le *spend.LimitError
		if errors.As(err, &le) {
			le.Call = call
			detail = le.Error() // a wrapping error's text was made before Call was set
		}
		return 0, problem.New(http.StatusPaymentRequired, gatewayapi.ProblemSpendLimit, detail)
	case err != nil:
		return 0, problem.New(http.StatusServiceUnavailable, "unavailable", "the spend ledger is unavailable").Retry(2).Because(err)
	}
	return id, nil
}

// perMinute admits at most n calls per key in any 60 seconds (n < 1: any
// number). It lives in the manager's memory: each manager process counts
// its own calls.
type perMinute struct {
	n     int
	mu    sync.Mutex
	calls map[string][]time.Time // each key's admitted calls of the last minute, oldest first
}

func newPerMinute(n int) *perMinute {
	return &perMinute{n: n, calls: map[string][]time.Time{}}
}

// admit records a call of key at now, or says how long until one would be
// admitted (a refused call is not recorded).
func (p *perMinute) admit(key string, now time.Time) (wait time.Duration, ok bool) {
	if p == nil || p.n < 1 {
		return 0, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) > 4096 { // forget keys that went quiet, so the map stays small
		for k, ts := range p.calls {
			if now.Sub(ts[len(ts)-1]) >= time.Minute {
				delete(p.calls, k)
			}
		}
	}
	ts := p.calls[key]
	for len(ts) > 0 && now.Sub(ts[0]) >= time.Minute {
		ts = ts[1:]
	}
	if len(ts) >= p.n {
		p.calls[key] = ts
		return ts[0].Add(time.Minute).Sub(now), false
	}
	p.calls[key] = append(ts, now)
	return 0, true
}
