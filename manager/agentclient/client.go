// Package agentclient is the manager's HTTP client for sandbox agents.
//
// The manager is not on any user network, so it reaches an agent through
// Caddy's sandbox-control listener (/_sandbox/<ip:port>/<path>), which checks
// the address against the sandbox pool like the user route does. With no
// proxy configured (a manager on the host) it dials the endpoint directly.
// The routes and their JSON are internal/sandboxapi's.
package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/lifecycle"
)

var _ lifecycle.Agent = (*Client)(nil)

// Client calls agents.
type Client struct {
	proxy string // e.g. http://caddy:8081; empty to dial directly
	key   string // the control key the proxy answers only with
	http  *http.Client
}

// New returns a client that goes through proxy (may be empty), showing it
// key (sandboxapi.HeaderControlKey).
func New(proxy, key string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tr.DisableCompression = true
	return &Client{proxy: strings.TrimRight(proxy, "/"), key: key, http: &http.Client{Transport: tr}}
}

func (c *Client) url(ep netip.AddrPort, path string) string {
	if c.proxy == "" {
		return "http://" + ep.String() + path
	}
	return c.proxy + "/_sandbox/" + ep.String() + path
}

// do sends a control request, with body as JSON unless it is nil. Every
// call of this client is one: Caddy's control listener sets the control
// header itself; a manager that dials directly sends it here.
func (c *Client) do(ctx context.Context, method string, ep netip.AddrPort, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(ep, path), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(sandboxapi.HeaderControl, "1")
	if c.proxy != "" {
		req.Header.Set(sandboxapi.HeaderControlKey, c.key)
	}
	return c.http.Do(req)
}

// drain reads what is left of a small answer and closes it, so the
// connection is used again.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
}

// Health calls GET /health: an error unless the agent answers 200 with a
// Health body.
func (c *Client) Health(ctx context.Context, ep netip.AddrPort) (sandboxapi.Health, error) {
	var h sandboxapi.Health
	resp, err := c.do(ctx, http.MethodGet, ep, sandboxapi.HealthPath, nil)
	if err != nil {
		return h, err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("GET %s at %s: %s", sandboxapi.HealthPath, ep, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&h); err != nil {
		return h, fmt.Errorf("GET %s at %s: decode answer: %w", sandboxapi.HealthPath, ep, err)
	}
	return h, nil
}

// Claim binds the sandbox to user with its gateway token (POST /claim). A
// claim for the user it already belongs to replaces the token; one for
// another user is sandboxapi.ErrClaimedByOther.
func (c *Client) Claim(ctx context.Context, ep netip.AddrPort, user, token string) error {
	return c.claim(ctx, ep, sandboxapi.Claim{User: user, Token: token})
}

// ClaimIfUnclaimed is Claim that never replaces a token: a sandbox that is
// user's already under another token is sandboxapi.ErrClaimedAlready.
func (c *Client) ClaimIfUnclaimed(ctx context.Context, ep netip.AddrPort, user, token string) error {
	return c.claim(ctx, ep, sandboxapi.Claim{User: user, Token: token, IfUnclaimed: true})
}

func (c *Client) claim(ctx context.Context, ep netip.AddrPort, claim sandboxapi.Claim) error {
	resp, err := c.do(ctx, http.MethodPost, ep, sandboxapi.ClaimPath, claim)
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var p problem.Problem
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&p)
	switch {
	case resp.StatusCode == http.StatusConflict && strings.HasSuffix(p.Type, "/"+sandboxapi.ProblemClaimedAlready):
		return fmt.Errorf("POST %s at %s for %s: %w", sandboxapi.ClaimPath, ep, claim.User, sandboxapi.ErrClaimedAlready)
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("POST %s at %s for %s: %w", sandboxapi.ClaimPath, ep, claim.User, sandboxapi.ErrClaimedByOther)
	default:
		return fmt.Errorf("POST %s at %s for %s: %s: %s", sandboxapi.ClaimPath, ep, claim.User, resp.Status, p.Detail)
	}
}

// PrepareIdle calls POST /pause?if_idle=1: busy on 409, else the agent's
// next due time (nil when nothing sleeps).
func (c *Client) PrepareIdle(ctx context.Context, ep netip.AddrPort) (bool, *time.Time, error) {
	resp, err := c.do(ctx, http.MethodPost, ep, sandboxapi.PausePath+"?"+sandboxapi.IfIdle+"=1", nil)
	if err != nil {
		return false, nil, err
	}
	defer drain(resp)
	switch resp.StatusCode {
	case http.StatusConflict:
		return true, nil, nil
	case http.StatusOK:
		var a sandboxapi.PauseAnswer
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&a); err != nil {
			return false, nil, fmt.Errorf("POST %s at %s: decode answer: %w", sandboxapi.PausePath, ep, err)
		}
		return false, a.NextWakeAt, nil
	default:
		return false, nil, fmt.Errorf("POST %s at %s: %s", sandboxapi.PausePath, ep, resp.Status)
	}
}

// Wake calls POST /wake.
func (c *Client) Wake(ctx context.Context, ep netip.AddrPort) error {
	resp, err := c.do(ctx, http.MethodPost, ep, sandboxapi.WakePath, nil)
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s at %s: %s", sandboxapi.WakePath, ep, resp.Status)
	}
	return nil
}

// Backup calls GET /backup and returns the archive's stream, which the
// caller closes. A stream cut short is an archive without its manifest,
// which no agent restores.
func (c *Client) Backup(ctx context.Context, ep netip.AddrPort) (io.ReadCloser, error) {
	resp, err := c.doStream(ctx, http.MethodGet, ep, sandboxapi.BackupPath, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer drain(resp)
		return nil, answerError(resp, "GET "+sandboxapi.BackupPath, ep)
	}
	return resp.Body, nil
}

// Restore calls POST /restore with the archive read from archive (force
// replaces data the sandbox has). The agent's refusals (409 has data, 422
// a bad archive) come back as *problem.Error with the agent's words.
func (c *Client) Restore(ctx context.Context, ep netip.AddrPort, archive io.Reader, force bool) (sandboxapi.RestoreAnswer, error) {
	var a sandboxapi.RestoreAnswer
	path := sandboxapi.RestorePath
	if force {
		path += "?" + sandboxapi.Force + "=1"
	}
	resp, err := c.doStream(ctx, http.MethodPost, ep, path, archive)
	if err != nil {
		return a, err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return a, answerError(resp, "POST "+sandboxapi.RestorePath, ep)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&a); err != nil {
		return a, fmt.Errorf("POST %s at %s: decode answer: %w", sandboxapi.RestorePath, ep, err)
	}
	return a, nil
}

// MigrateStorage calls POST /storage/migrate?to=: the agent moves every
// agent's database to that storage (sqlite or postgres), copied and
// verified, and answers where they were and are. Its refusals come back
// as *problem.Error with the agent's words.
func (c *Client) MigrateStorage(ctx context.Context, ep netip.AddrPort, to string) (sandboxapi.MigrateStorageAnswer, error) {
	var a sandboxapi.MigrateStorageAnswer
	call := "POST " + sandboxapi.MigrateStoragePath
	resp, err := c.doStream(ctx, http.MethodPost, ep, sandboxapi.MigrateStoragePath+"?to="+url.QueryEscape(to), nil)
	if err != nil {
		return a, err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return a, answerError(resp, call, ep)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&a); err != nil {
		return a, fmt.Errorf("%s at %s: decode answer: %w", call, ep, err)
	}
	return a, nil
}

// doStream is do with a raw body.
func (c *Client) doStream(ctx context.Context, method string, ep netip.AddrPort, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(ep, path), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set(sandboxapi.HeaderControl, "1")
	if c.proxy != "" {
		req.Header.Set(sandboxapi.HeaderControlKey, c.key)
	}
	return c.http.Do(req)
}

// answerError is the agent's problem answer: a 4xx keeps its status, type
// and detail for the caller to pass on; anything else is an error.
func answerError(resp *http.Response, call string, ep netip.AddrPort) error {
	var p problem.Problem
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&p)
	if resp.StatusCode/100 == 4 {
		kind := p.Type[strings.LastIndex(p.Type, "/")+1:]
		return problem.New(resp.StatusCode, kind, p.Detail)
	}
	return fmt.Errorf("%s at %s: %s: %s", call, ep, resp.Status, p.Detail)
}
