// Package agentdb gives each user's agents a Postgres database of their
// own, when the agents' storage is Postgres (AFFIDO_AGENT_STORAGE=postgres):
//
//   - credential.go: a role and a database per user, made by the manager
//     the first time the user's agent asks (GET /v1/gateway/storage), which
//     only that role can connect to; the cluster's other databases (the
//     registry's among them) admit no role but their owners.
//   - relay.go: the sandbox's only way to Postgres, a tunnel through the
//     gateway (GET /v1/gateway/storage/connect, upgraded) that the manager
//     opens for an authenticated sandbox and that admits exactly its user's
//     role to its user's database: no other role, no other database, no
//     replication, no cancel requests.
//
// The role's password is the second lock: the tunnel is opened with the
// sandbox's gateway token, and Postgres still asks for the role's
// password. Both live in the agent process's memory and its data
// directory, which the tools' uid cannot read (agent/privsep).
package agentdb

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store makes and hands out the users' storage credentials and relays
// their agents' connections.
type Store struct {
	// MakeOnAsk makes a user's storage on their agent's first ask (the
	// stack's default is Postgres); without it only users the admin moved
	// to Postgres (Make) are served, so on a SQLite stack no sandbox can
	// make a role and a database.
	MakeOnAsk bool

	pool *pgxpool.Pool
	// dial reaches the Postgres server the pool speaks to (its unix
	// socket in the stack), for the relay.
	dial func(ctx context.Context) (net.Conn, error)

	mu      sync.Mutex
	ready   map[string]bool // roles whose role and database exist
	shut    bool            // the cluster's PUBLIC grants are revoked
	tunnels map[string]int  // open tunnels per user
}

// MaxConnections is a user's role's CONNECTION LIMIT, and MaxTunnels (the
// same) bounds its open tunnels: each open agent holds one connection
// (agent/durable/postgres), a user has up to 32 agents, and opening one
// migrates its schema on one more.
const (
	MaxConnections = 40
	MaxTunnels     = MaxConnections
)

// Open connects to the cluster that holds the agents' databases, as a role
// that may create roles and databases (the stack's superuser).
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("agent storage: %w", err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("agent storage: %w", err)
	}
	return &Store{pool: pool, dial: dialer(cfg.ConnConfig.Config), ready: map[string]bool{}, tunnels: map[string]int{}}, nil
}

// Close closes the pool (tunnels end with their connections).
func (s *Store) Close() { s.pool.Close() }

// dialer reaches the server of cfg the way pgx would: its unix socket when
// its host is a directory, else host:port.
func dialer(cfg pgconn.Config) func(ctx context.Context) (net.Conn, error) {
	network, addr := "tcp", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	if len(cfg.Host) > 0 && cfg.Host[0] == '/' {
		network, addr = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	return func(ctx context.Context) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		return d.DialContext(ctx, network, addr)
	}
}
