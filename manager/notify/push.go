package notify

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	webpush "github.com/SherClockHolmes/webpush-go"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/registry"
)

// Web Push (RFC 8030, message encryption RFC 8291, VAPID RFC 8292): each
// due notification is also pushed to every browser its owner subscribed
// from a web session. The push endpoint is a URL the browser chose, so it
// is fetched only through the guarded outbound client.

// Bounds of a push subscription and of what is pushed.
const (
	MaxEndpoint    = 2048         // bytes of a subscription's endpoint URL
	MaxPushPayload = 3 << 10      // bytes of the JSON pushed (push services take about 4 KiB)
	PushTTL        = 12 * 60 * 60 // seconds a push service keeps an undelivered push
)

// ErrBadSubscription is wrapped by every refusal of a subscription a
// browser sent; the message says what is wrong.
var ErrBadSubscription = errors.New("bad push subscription")

// VAPID is the manager's application server key pair (RFC 8292), P-256.
type VAPID struct {
	Private []byte // the scalar, 32 bytes
	Public  []byte // the uncompressed point, 65 bytes
}

// PublicKey is the public key as a page passes it to
// pushManager.subscribe's applicationServerKey: base64url, no padding.
func (v VAPID) PublicKey() string { return base64.RawURLEncoding.EncodeToString(v.Public) }

// KeyStore keeps the VAPID key pair (the registry). VAPIDKeys returns the
// stored pair, storing priv and pub first while there is none.
type KeyStore interface {
	VAPIDKeys(ctx context.Context, priv, pub []byte) ([]byte, []byte, error)
}

// LoadVAPID returns the stored key pair, made and stored by the first
// manager that asks, and checks that its halves belong together.
func LoadVAPID(ctx context.Context, ks KeyStore) (VAPID, error) {
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return VAPID{}, fmt.Errorf("make vapid keys: %w", err)
	}
	priv, pub, err := ks.VAPIDKeys(ctx, k.Bytes(), k.PublicKey().Bytes())
	if err != nil {
		return VAPID{}, err
	}
	stored, err := ecdh.P256().NewPrivateKey(priv)
	if err != nil || !bytes.Equal(stored.PublicKey().Bytes(), pub) {
		return VAPID{}, errors.New("the stored vapid keys are not a P-256 key pair")
	}
	return VAPID{Private: priv, Public: pub}, nil
}

// ParseSubscription checks the parts of a browser's PushSubscription:
// endpoint an https URL of at most MaxEndpoint bytes, p256dh an
// uncompressed P-256 point and auth 16 bytes, both base64url (padding
// allowed). Every refusal wraps ErrBadSubscription. Plain http is taken
// only for an endpoint whose host is an address in plainHTTP: the ranges
// the operator allows outbound explicitly (AFFIDO_OUTBOUND_ALLOW, a push
// receiver on the local network, as the test stack's sink is); real push
// services are https.
func ParseSubscription(endpoint, p256dh, auth string, plainHTTP ...netip.Prefix) (registry.PushSubscription, error) {
	bad := func(format string, a ...any) (registry.PushSubscription, error) {
		return registry.PushSubscription{}, fmt.Errorf("%w: "+format, append([]any{ErrBadSubscription}, a...)...)
	}
	if len(endpoint) > MaxEndpoint {
		return bad("the endpoint is longer than %d bytes", MaxEndpoint)
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && !(u.Scheme == "http" && allowed(u.Hostname(), plainHTTP))) ||
		u.Host == "" || u.Hostname() == "" || u.User != nil || u.Opaque != "" {
		return bad("the endpoint must be an https URL")
	}
	key, err := decodeKey(p256dh)
	if err != nil || len(key) != 65 {
		return bad("keys.p256dh must be an uncompressed P-256 public key (65 bytes, base64url)")
	}
	if _, err := ecdh.P256().NewPublicKey(key); err != nil {
		return bad("keys.p256dh is not a point on P-256")
	}
	secret, err := decodeKey(auth)
	if err != nil || len(secret) != 16 {
		return bad("keys.auth must be 16 bytes, base64url")
	}
	return registry.PushSubscription{Endpoint: endpoint, P256dh: key, Auth: secret}, nil
}

// allowed says whether host is an address within one of ranges.
func allowed(host string, ranges []netip.Prefix) bool {
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	for _, p := range ranges {
		if p.Contains(addr.Unmap()) {
			return true
		}
	}
	return false
}

func decodeKey(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// PushStore is what pushing needs of the registry: the user's
// subscriptions of unexpired sessions; dropping one its push service says
// is gone; recording the latest try of one.
type PushStore interface {
	PushSubscriptions(ctx context.Context, user string) ([]registry.PushSubscription, error)
	DropPushSubscription(ctx context.Context, id int64, endpoint string) error
	RecordPushTry(ctx context.Context, id int64, errText string) error
}

// Pusher sends notifications as Web Push.
type Pusher struct {
	Store PushStore
	// Client must be the guarded outbound client (manager/outbound): the
	// endpoints are chosen by browsers, that is by users.
	Client *http.Client
	Keys   VAPID
	// Subject is the contact in the VAPID token: mailto:… or https://….
	Subject string
	Log     *slog.Logger
}

// pushOutcome is what the pushes of one notification came to.
type pushOutcome struct {
	tried int    // subscriptions tried
	sent  int    // accepted by their push service
	retry bool   // one failed in a way a later try may not (network, 429, 5xx)
	code  int    // the last push service's status (0: none answered)
	err   string // the last failure
}

// push sends n to each of its user's subscriptions at once, and drops
// those whose push service answers 404 or 410 (the browser unsubscribed).
func (p *Pusher) push(ctx context.Context, n registry.Notification) pushOutcome {
	subs, err := p.Store.PushSubscriptions(ctx, n.UserID)
	if err != nil {
		p.Log.Warn("web push: list subscriptions", "user", n.UserID, "err", err)
		return pushOutcome{retry: true, err: err.Error()}
	}
	if len(subs) == 0 {
		return pushOutcome{}
	}
	msg := payload(n)
	// The library appends its padding to the message it is given: each
	// send gets its own copy, without spare capacity to write into.
	own := func() []byte { return slices.Clip(bytes.Clone(msg)) }
	var mu sync.Mutex
	out := pushOutcome{tried: len(subs)}
	var wg sync.WaitGroup
	for _, sub := range subs {
		wg.Go(func() {
			code, retry, err := p.send(ctx, n, sub, own())
			gone := code == http.StatusNotFound || code == http.StatusGone
			errText := ""
			if err != nil {
				errText = err.Error()
			}
			switch {
			case gone:
				err = p.Store.DropPushSubscription(ctx, sub.ID, sub.Endpoint)
			default:
				err = p.Store.RecordPushTry(ctx, sub.ID, errText)
			}
			if err != nil {
				p.Log.Warn("web push: record try", "subscription", sub.ID, "err", err)
			}
			p.Log.Info("web push try", "user", n.UserID, "key", n.Key, "subscription", sub.ID, "service", origin(sub.Endpoint),
				"code", code, "dropped", gone, "err", errText)
			mu.Lock()
			defer mu.Unlock()
			if code != 0 {
				out.code = code
			}
			if errText == "" {
				out.sent++
			} else {
				out.err = errText
				out.retry = out.retry || retry
			}
		})
	}
	wg.Wait()
	return out
}

// send pushes msg to sub: the push service's status (0 when none
// answered), whether a later try may fare better, and why it failed.
func (p *Pusher) send(ctx context.Context, n registry.Notification, sub registry.PushSubscription, msg []byte) (int, bool, error) {
	urgency := webpush.UrgencyNormal
	if n.Kind == gatewayapi.KindApproval {
		urgency = webpush.UrgencyHigh
	}
	resp, err := webpush.SendNotificationWithContext(ctx, msg, &webpush.Subscription{
		Endpoint: sub.Endpoint,
		Keys: webpush.Keys{
			P256dh: base64.RawURLEncoding.EncodeToString(sub.P256dh),
			Auth:   base64.RawURLEncoding.EncodeToString(sub.Auth),
		},
	}, &webpush.Options{
		HTTPClient: p.Client,
		// The library adds "mailto:" to anything but an https URL.
		Subscriber:      strings.TrimPrefix(p.Subject, "mailto:"),
		TTL:             PushTTL,
		Urgency:         urgency,
		Topic:           fmt.Sprintf("affido-%d", n.ID), // a repeat replaces one still queued
		VAPIDPublicKey:  base64.RawURLEncoding.EncodeToString(p.Keys.Public),
		VAPIDPrivateKey: base64.RawURLEncoding.EncodeToString(p.Keys.Private),
	})
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // the request went out and got no answer
			refused := errors.Is(err, outbound.ErrRefused) || errors.Is(err, outbound.ErrTooManyRedirects)
			return 0, !refused, fmt.Errorf("push service: %w", ue.Err)
		}
		return 0, false, fmt.Errorf("encrypt push: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 == 2 {
		return resp.StatusCode, false, nil
	}
	retry := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	return resp.StatusCode, retry, fmt.Errorf("push service answered %s: %s", resp.Status, excerpt(body))
}

// pushPayload is the JSON a service worker receives in its push event.
type pushPayload struct {
	Title string `json:"title"`
	Body  string `json:"body"`
	Kind  string `json:"kind"`  // gatewayapi's Kind constants, or ""
	Agent string `json:"agent"` // the agent it is from, or ""
	URL   string `json:"url"`   // the page of the web client to open, same origin
	Tag   string `json:"tag"`   // the same for every push of one notification
}

// payload is n as pushed, at most MaxPushPayload bytes: the text is cut
// (on a rune boundary, with "…") when it would not fit.
func payload(n registry.Notification) []byte {
	kind := kindOf(n)
	p := pushPayload{Title: title(kind), Kind: kind, Agent: n.Agent, Tag: fmt.Sprintf("affido-%d", n.ID)}
	page := "activity"
	switch kind {
	case gatewayapi.KindReminder, gatewayapi.KindJob:
		page = "reminders"
	case gatewayapi.KindApproval:
		page = "approvals"
	case gatewayapi.KindSpend, gatewayapi.KindConnector:
		page = "settings"
	}
	p.URL = "/app/#/" + page
	if n.Agent != "" {
		p.URL = "/app/?agent=" + url.QueryEscape(n.Agent) + "#/" + page
	}
	p.Body = n.Text
	if b := marshal(p); len(b) <= MaxPushPayload {
		return b
	}
	// The longest prefix of the text that fits with "…" after it (escapes
	// make the JSON longer than the text, so search).
	lo, hi := 0, len(n.Text) // the prefix of lo bytes fits; hi does not
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if p.Body = n.Text[:mid] + "…"; len(marshal(p)) <= MaxPushPayload {
			lo = mid
		} else {
			hi = mid
		}
	}
	for lo > 0 && !utf8.RuneStart(n.Text[lo]) {
		lo--
	}
	p.Body = n.Text[:lo] + "…"
	return marshal(p)
}

// kindOf is n's kind; agents from before kinds sent none, but their
// reminders' keys say so.
func kindOf(n registry.Notification) string {
	if n.Kind == "" && strings.HasPrefix(n.Key, "reminder-") {
		return gatewayapi.KindReminder
	}
	return n.Kind
}

// title is a notification's title on the phone or desktop.
func title(kind string) string {
	switch kind {
	case gatewayapi.KindReminder:
		return "Reminder"
	case gatewayapi.KindApproval:
		return "Your agent asks for approval"
	case gatewayapi.KindJob:
		return "Job done"
	case gatewayapi.KindSpend:
		return "Spend limit reached"
	case gatewayapi.KindConnector:
		return "A connector's tool was turned off"
	}
	return "Affido"
}

func marshal(p pushPayload) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p) // strings only: cannot fail
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// origin is the scheme and host of an endpoint: enough to log, while the
// whole URL is the browser's capability.
func origin(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// excerpt is the start of a push service's answer, printable, for the
// recorded error.
func excerpt(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), ""))
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		cut := 200
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
