// Package storage holds an agent's durable storage in the user's own
// Postgres database (AFFIDO_AGENT_STORAGE=postgres) instead of SQLite
// files on the data volume: one schema per agent, migrated by this build
// before it opens, each process a newer generation of the lease than any
// before it (agent/durable/postgres).
//
// The sandbox has no route to Postgres. The manager makes the user's role
// and database and hands the agent their credential over the gateway (GET
// …/storage, with the sandbox's token); the agent keeps it in memory only
// and connects through the gateway's tunnel (…/storage/connect, an HTTP
// upgrade), which the manager opens for this user's role and database and
// nothing else. The tools' uid holds neither the token nor the password.
package storage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/internal/gatewayapi"
)

// Postgres is the host's Storage on the user's Postgres database.
type Postgres struct {
	Gateway    string        // the gateway's base URL, ending in gatewayapi.Prefix
	Token      func() string // the sandbox's gateway token
	Generation int64         // this process's place in the lease's order
	HTTP       *http.Client  // for the credential (default: a 30 s timeout)

	mu   sync.Mutex
	cred *gatewayapi.StorageCredential
}

// New returns the storage of a process started now.
func New(gateway string, token func() string) *Postgres {
	return &Postgres{Gateway: strings.TrimRight(gateway, "/"), Token: token, Generation: time.Now().UnixNano()}
}

// Schema is agent a's schema in the user's database.
func Schema(a agents.Agent) string { return "agent_" + a.ID }

// Open migrates agent a's schema to this build's version, then opens it.
func (p *Postgres) Open(ctx context.Context, a agents.Agent) (durable.DB, error) {
	dsn, err := p.dsn(ctx)
	if err != nil {
		return nil, err
	}
	if err := postgres.MigrateWith(ctx, dsn, Schema(a), p.configure); err != nil {
		p.forget()
		return nil, err
	}
	db, err := postgres.Open(ctx, dsn, postgres.Options{Schema: Schema(a), Generation: p.Generation, Config: p.configure})
	if err != nil {
		p.forget()
		return nil, err
	}
	return db, nil
}

// Remove drops a deleted agent's schema and everything in it.
func (p *Postgres) Remove(ctx context.Context, a agents.Agent) error {
	dsn, err := p.dsn(ctx)
	if err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	p.configure(cfg)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("remove the storage of agent %s: %w", a.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{Schema(a)}.Sanitize()+` CASCADE`); err != nil {
		return fmt.Errorf("remove the storage of agent %s: %w", a.Name, err)
	}
	return nil
}

// configure makes a connection go through the gateway's tunnel.
func (p *Postgres) configure(cfg *pgx.ConnConfig) {
	cfg.LookupFunc = func(_ context.Context, host string) ([]string, error) { return []string{host}, nil }
	cfg.DialFunc = p.dial
	cfg.ConnectTimeout = 30 * time.Second
}

// dsn is the user's database as the credential names it; the host and
// port are never dialled (configure's DialFunc is the tunnel).
func (p *Postgres) dsn(ctx context.Context) (string, error) {
	c, err := p.credential(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("host=%s port=5432 user=%s dbname=%s password=%s sslmode=disable application_name=affido-agent",
		gatewayapi.StorageUpgrade, c.Role, c.Database, c.Password), nil
}

// forget drops the cached credential, so the next open asks again (the
// manager may have made the role again).
func (p *Postgres) forget() {
	p.mu.Lock()
	p.cred = nil
	p.mu.Unlock()
}

// ErrNoToken is the storage's answer before the sandbox is claimed.
var ErrNoToken = errors.New("the sandbox has no gateway token yet (it is not claimed)")
