// Package agentclient is the manager's HTTP client for sandbox agents.
//
// The manager is not on any user network, so it reaches an agent through
// Caddy's sandbox-control listener (/_sandbox/<ip:port>/<path>), which checks
// the address against the sandbox pool like the user route does. With no
// proxy configured (a manager on the host) it dials the endpoint directly.
package agentclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/affido/affido/manager/lifecycle"
)

// Client calls agents.
type Client struct {
	proxy string // e.g. http://caddy:8081; empty to dial directly
	http  *http.Client
}

// New returns a client that goes through proxy (may be empty).
func New(proxy string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tr.DisableCompression = true
	return &Client{proxy: strings.TrimRight(proxy, "/"), http: &http.Client{Transport: tr}}
}

var _ lifecycle.Agent = (*Client)(nil)

func (c *Client) url(ep netip.AddrPort, path string) string {
	if c.proxy == "" {
		return "http://" + ep.String() + path
	}
	return c.proxy + "/_sandbox/" + ep.String() + path
}

func (c *Client) do(ctx context.Context, method string, ep netip.AddrPort, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(ep, path), nil)
	if err != nil {
		return nil, err
	}
	return c.http.Do(req)
}

// Health returns nil when GET /health answers 200.
func (c *Client) Health(ctx context.Context, ep netip.AddrPort) error {
	resp, err := c.do(ctx, http.MethodGet, ep, "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /health at %s: %s", ep, resp.Status)
	}
	return nil
}

// PrepareIdle calls POST /pause?if_idle=1.
func (c *Client) PrepareIdle(ctx context.Context, ep netip.AddrPort) (bool, *time.Time, error) {
	resp, err := c.do(ctx, http.MethodPost, ep, "/pause?if_idle=1")
	if err != nil {
		return false, nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusConflict:
		return true, nil, nil
	case http.StatusOK:
		var body struct {
			NextWakeAt *time.Time `json:"next_wake_at"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body); err != nil {
			return false, nil, fmt.Errorf("POST /pause at %s: decode answer: %w", ep, err)
		}
		return false, body.NextWakeAt, nil
	default:
		return false, nil, fmt.Errorf("POST /pause at %s: %s", ep, resp.Status)
	}
}

// Wake calls POST /wake.
func (c *Client) Wake(ctx context.Context, ep netip.AddrPort) error {
	resp, err := c.do(ctx, http.MethodPost, ep, "/wake")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST /wake at %s: %s", ep, resp.Status)
	}
	return nil
}
