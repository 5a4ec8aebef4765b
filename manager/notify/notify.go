// Package notify delivers the notifications sandboxes hand to the gateway
// (reminders, approvals) and the manager's own (spend stops) to each
// user's ntfy-compatible URL: a POST of the text, up to MaxTries times
// with backoff, every try recorded in the registry. With a Pusher each is
// also sent as Web Push to the user's subscribed browsers (push.go).
// Delivery is at least once.
//
// The two channels: with a notify URL, ntfy decides the notification's
// status and retries, and Web Push goes out once, with the first try, and
// never holds ntfy up. Without one, Web Push is the channel: delivered
// when one push service accepted it, tried again with the same backoff
// when none did and a failure may pass (network, 429, 5xx), no_endpoint
// when the user has no subscription either.
package notify

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/affido/affido/manager/registry"
)

// MaxTries is how often a notification is tried before it is marked failed.
const MaxTries = 5

// Store is what the deliverer needs of the registry.
type Store interface {
	DueNotifications(ctx context.Context, limit int) ([]registry.Notification, error)
	RecordNotificationTry(ctx context.Context, id int64, try, code int, errText, status string, next time.Time) error
}

// Deliverer sends due notifications.
type Deliverer struct {
	Store  Store
	Client *http.Client
	Log    *slog.Logger
	// Backoff is the wait after failed try n (1-based); default 1 s doubling.
	Backoff func(try int) time.Duration
	// Push, if set, also sends every notification as Web Push.
	Push *Pusher

	kick chan struct{}

	// Deliveries run in parallel (at most Workers), so one user's slow
	// endpoint does not hold up anyone else's; a notification being
	// delivered is not picked up again meanwhile.
	mu       sync.Mutex
	inflight map[int64]bool
	sem      chan struct{}
}

// Workers is how many notifications are delivered at once.
const Workers = 8

// New returns a deliverer that sends with client, which must be the
// guarded outbound client (manager/outbound): the URLs are the users'.
func New(store Store, log *slog.Logger, client *http.Client) *Deliverer {
	return &Deliverer{Store: store, Log: log, Client: client, kick: make(chan struct{}, 1),
		inflight: map[int64]bool{}, sem: make(chan struct{}, Workers)}
}

// Kick makes the deliverer look for due notifications now.
func (d *Deliverer) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends.
func (d *Deliverer) Run(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.kick:
		}
		ns, err := d.Store.DueNotifications(ctx, 50)
		if err != nil {
			if ctx.Err() == nil {
				d.Log.Warn("notifications: list due", "err", err)
			}
			continue
		}
		for _, n := range ns {
			if !d.claim(n.ID) {
				continue
			}
			select {
			case d.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				defer func() { <-d.sem; d.release(n.ID) }()
				d.deliver(ctx, n)
			}()
		}
	}
}

// claim marks id as being delivered; false if it already is.
func (d *Deliverer) claim(id int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inflight[id] {
		return false
	}
	d.inflight[id] = true
	return true
}

func (d *Deliverer) release(id int64) {
	d.mu.Lock()
	delete(d.inflight, id)
	d.mu.Unlock()
}

func (d *Deliverer) backoff(try int) time.Duration {
	if d.Backoff != nil {
		return d.Backoff(try)
	}
	return time.Second << (try - 1)
}

func (d *Deliverer) deliver(ctx context.Context, n registry.Notification) {
	try := n.Tries + 1
	var pushed chan pushOutcome
	if d.Push != nil && (n.URL == "" || n.Tries == 0) {
		pushed = make(chan pushOutcome, 1)
		go func() { pushed <- d.Push.push(ctx, n) }()
	}
	var code int
	var status, errText string
	next := time.Now()
	if n.URL == "" {
		var out pushOutcome
		if pushed != nil {
			out = <-pushed
		}
		code = out.code
		switch {
		case out.sent > 0:
			status = "delivered"
		case out.tried == 0 && !out.retry:
			status, errText = "no_endpoint", "the user has no notify URL and no push subscription"
		default:
			status, next = d.afterFailure(try, out.retry)
			errText = "web push: " + out.err
		}
	} else {
		var err error
		code, err = d.post(ctx, n)
		status = "delivered"
		if err != nil {
			status, next = d.afterFailure(try, true)
			errText = err.Error()
		}
	}
	d.record(ctx, n, try, code, errText, status, next)
	if pushed != nil && n.URL != "" {
		<-pushed // the worker's slot also bounds pushes in flight
	}
}

// afterFailure is the status after failed try, and its next attempt:
// pending again after the backoff while retry allows and tries are left;
// failed otherwise.
func (d *Deliverer) afterFailure(try int, retry bool) (string, time.Time) {
	if !retry || try >= MaxTries {
		return "failed", time.Now()
	}
	return "pending", time.Now().Add(d.backoff(try))
}

func (d *Deliverer) record(ctx context.Context, n registry.Notification, try, code int, errText, status string, next time.Time) {
	if rerr := d.Store.RecordNotificationTry(ctx, n.ID, try, code, errText, status, next); rerr != nil {
		d.Log.Warn("notifications: record try", "id", n.ID, "err", rerr)
	}
	d.Log.Info("notification try", "user", n.UserID, "key", n.Key, "try", try, "status", status, "code", code, "err", errText)
	if status == "pending" {
		time.AfterFunc(d.backoff(try), d.Kick)
	}
}

// post sends the notification the way ntfy expects it: the text as body, a title header.
func (d *Deliverer) post(ctx context.Context, n registry.Notification) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, strings.NewReader(n.Text))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	req.Header.Set("Title", title(kindOf(n)))
	req.Header.Set("X-Affido-Notification", n.Key)
	if n.DueAt != nil {
		req.Header.Set("X-Affido-Due", n.DueAt.UTC().Format(time.RFC3339Nano))
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("endpoint answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
