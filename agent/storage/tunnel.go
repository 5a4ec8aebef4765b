package storage

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
)

// credential returns the user's storage credential, asking the manager
// the first time (it makes the role and database then).
func (p *Postgres) credential(ctx context.Context) (gatewayapi.StorageCredential, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cred != nil {
		return *p.cred, nil
	}
	token := p.Token()
	if token == "" {
		return gatewayapi.StorageCredential{}, ErrNoToken
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.Gateway+gatewayapi.StoragePath, nil)
	if err != nil {
		return gatewayapi.StorageCredential{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := p.HTTP
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return gatewayapi.StorageCredential{}, fmt.Errorf("ask for the storage credential: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return gatewayapi.StorageCredential{}, fmt.Errorf("ask for the storage credential: %s: %s", resp.Status, body)
	}
	var c gatewayapi.StorageCredential
	if err := json.Unmarshal(body, &c); err != nil || c.Role == "" || c.Database == "" || c.Password == "" {
		return gatewayapi.StorageCredential{}, fmt.Errorf("ask for the storage credential: an answer without one (%v)", err)
	}
	p.cred = &c
	return c, nil
}

// dial opens a tunnel to the user's database through the gateway: an HTTP
// upgrade with the sandbox's token, then the Postgres protocol.
func (p *Postgres) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	u, err := url.Parse(p.Gateway + gatewayapi.StorageConnectPath)
	if err != nil {
		return nil, err
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("storage tunnel: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\nAuthorization: Bearer %s\r\n\r\n",
		u.RequestURI(), u.Host, gatewayapi.StorageUpgrade, p.Token())
	if _, err := io.WriteString(conn, req); err != nil {
		conn.Close()
		return nil, fmt.Errorf("storage tunnel: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("storage tunnel: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		conn.Close()
		return nil, fmt.Errorf("storage tunnel: %s: %s", resp.Status, body)
	}
	_ = conn.SetDeadline(time.Time{})
	return &tunnel{Conn: conn, r: br}, nil
}

// tunnel is the upgraded connection, read through the reader that read
// the 101 (it may hold the server's first bytes).
type tunnel struct {
	net.Conn
	r *bufio.Reader
}

func (t *tunnel) Read(b []byte) (int, error) { return t.r.Read(b) }
