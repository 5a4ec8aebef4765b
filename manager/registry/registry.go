// Package registry is the manager's Postgres state: users, their credentials,
// their sandboxes and the audit trail. Schema changes come only from the
// embedded migrations.
package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned when a row asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrQueueFull is returned when a user has as many pending notifications
// as allowed.
var ErrQueueFull = errors.New("notification queue full")

// ErrUnauthenticated is returned for missing, unknown or expired credentials.
var ErrUnauthenticated = errors.New("unauthenticated")

// Store is the registry on a Postgres pool.
type Store struct {
	pool *pgxpool.Pool
}

// Open connects to Postgres. It does not migrate.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse postgres dsn: %w", err)
	}
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	return &Store{pool: pool}, nil
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping reports whether Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Sandbox is one user's sandbox row.
type Sandbox struct {
	UserID string
	// Name is what the sandbox's Docker objects are named after: the user
	// id, or the pool name of a sandbox claimed from the warm pool.
	Name         string
	State        string
	Subnet       netip.Prefix
	ContainerID  string
	NetworkID    string
	Endpoint     string
	TokenHash    []byte
	CreatedAt    time.Time
	UpdatedAt    time.Time
	LastActiveAt time.Time
	WakeAt       *time.Time
	// ReportedWakeAt is the agent's own last report of its next due time
	// (nil: nothing waits on time), made at ReportedAt.
	ReportedWakeAt *time.Time
	ReportedAt     *time.Time
}

// Sandbox states as stored.
const (
	StateProvisioning = "provisioning"
	StateRunning      = "running"
	StatePaused       = "paused"
	StateStopped      = "stopped"
	StateRemoved      = "removed"
)

// HashToken is how API, sandbox and web session tokens are stored.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// NewToken returns a random URL-safe token with 256 bits of entropy.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return base64.RawURLEncoding.EncodeToString(b)
}

// UserForSession returns the user of an unexpired web session token and
// when the session expires. Only the token's hash is stored.
func (s *Store) UserForSession(ctx context.Context, token string) (string, time.Time, error) {
	var user string
	var expires time.Time
	err := s.pool.QueryRow(ctx,
		`SELECT user_id, expires_at FROM session WHERE token_hash = $1 AND expires_at > now()`, HashToken(token)).Scan(&user, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, ErrUnauthenticated
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("look up session: %w", err)
	}
	return user, expires, nil
}

// UserForAPIToken returns the user an API token belongs to. It only reads:
// the caller records the use with TouchAPITokens.
func (s *Store) UserForAPIToken(ctx context.Context, token string) (string, error) {
	var user string
	err := s.pool.QueryRow(ctx, `SELECT user_id FROM api_tokens WHERE token_hash = $1`, HashToken(token)).Scan(&user)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrUnauthenticated
	}
	if err != nil {
		return "", fmt.Errorf("look up api token: %w", err)
	}
	return user, nil
}

// TouchAPITokens sets last_used_at of the API tokens whose hashes (as
// HashToken makes them) are the keys of used, in one statement. It never
// moves a time back, so managers flushing out of order agree; hashes of
// tokens revoked meanwhile are ignored.
func (s *Store) TouchAPITokens(ctx context.Context, used map[[sha256.Size]byte]time.Time) error {
	if len(used) == 0 {
		return nil
	}
	hashes := make([][]byte, 0, len(used))
	times := make([]time.Time, 0, len(used))
	for h, at := range used {
		hashes = append(hashes, h[:])
		times = append(times, at)
	}
	_, err := s.pool.Exec(ctx, `UPDATE api_tokens t SET last_used_at = GREATEST(t.last_used_at, u.at)
		FROM unnest($1::bytea[], $2::timestamptz[]) AS u(hash, at) WHERE t.token_hash = u.hash`, hashes, times)
	if err != nil {
		return fmt.Errorf("touch %d api tokens: %w", len(used), err)
	}
	return nil
}

// EnsureUser creates the user if it does not exist.
func (s *Store) EnsureUser(ctx context.Context, user string) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING`, user); err != nil {
		return fmt.Errorf("ensure user %s: %w", user, err)
	}
	return nil
}

// CreateAPIToken creates the user if needed and returns a new API token;
// only its hash is stored.
func (s *Store) CreateAPIToken(ctx context.Context, user string) (string, error) {
	if err := s.EnsureUser(ctx, user); err != nil {
		return "", err
	}
	token := NewToken()
	if _, err := s.pool.Exec(ctx, `INSERT INTO api_tokens (token_hash, user_id) VALUES ($1, $2)`,
		HashToken(token), user); err != nil {
		return "", fmt.Errorf("create api token for %s: %w", user, err)
	}
	return token, nil
}

// PutSession creates the user if needed and stores a web session token
// (its hash).
func (s *Store) PutSession(ctx context.Context, user, token string, expires time.Time) error {
	if err := s.EnsureUser(ctx, user); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO session (token_hash, user_id, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (token_hash) DO UPDATE SET user_id = EXCLUDED.user_id, expires_at = EXCLUDED.expires_at`,
		HashToken(token), user, expires)
	if err != nil {
		return fmt.Errorf("put session for %s: %w", user, err)
	}
	return nil
}

const sandboxColumns = `user_id, name, state, subnet, container_id, network_id, endpoint, token_hash,
	created_at, updated_at, last_active_at, wake_at, reported_wake_at, reported_at`

func scanSandbox(row pgx.Row) (Sandbox, error) {
	var sb Sandbox
	err := row.Scan(&sb.UserID, &sb.Name, &sb.State, &sb.Subnet, &sb.ContainerID, &sb.NetworkID, &sb.Endpoint,
		&sb.TokenHash, &sb.CreatedAt, &sb.UpdatedAt, &sb.LastActiveAt, &sb.WakeAt, &sb.ReportedWakeAt, &sb.ReportedAt)
	return sb, err
}

// Sandbox returns one user's sandbox row, or ErrNotFound.
func (s *Store) Sandbox(ctx context.Context, user string) (Sandbox, error) {
	sb, err := scanSandbox(s.pool.QueryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE user_id = $1`, user))
	if errors.Is(err, pgx.ErrNoRows) {
		return Sandbox{}, ErrNotFound
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox %s: %w", user, err)
	}
	return sb, nil
}

// Sandboxes returns every sandbox row, by user.
func (s *Store) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes ORDER BY user_id`)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Sandbox, error) { return scanSandbox(r) })
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// SubnetPicker chooses a free subnet given the ones taken.
type SubnetPicker func(used []netip.Prefix) (netip.Prefix, error)

// withSubnet runs fn in a transaction with a subnet chosen by pick from
// those taken by sandboxes and the warm pool. Allocation is serialized
// across managers by a transaction-scoped advisory lock.
func (s *Store) withSubnet(ctx context.Context, pick SubnetPicker, fn func(tx pgx.Tx, sn netip.Prefix) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('affido:subnets'))`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT subnet FROM sandboxes UNION ALL SELECT subnet FROM pool_sandboxes`)
		if err != nil {
			return err
		}
		used, err := pgx.CollectRows(rows, pgx.RowTo[netip.Prefix])
		if err != nil {
			return err
		}
		sn, err := pick(used)
		if err != nil {
			return err
		}
		return fn(tx, sn)
	})
}

// CreateSandbox inserts a sandbox row for user, named after the user, in
// state provisioning with a subnet chosen by pick.
func (s *Store) CreateSandbox(ctx context.Context, user string, pick SubnetPicker) (Sandbox, error) {
	var sb Sandbox
	err := s.withSubnet(ctx, pick, func(tx pgx.Tx, sn netip.Prefix) error {
		if _, err := tx.Exec(ctx, `INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING`, user); err != nil {
			return err
		}
		var err error
		sb, err = scanSandbox(tx.QueryRow(ctx, `INSERT INTO sandboxes (user_id, name, state, subnet) VALUES ($1, $1, $2, $3)
			RETURNING `+sandboxColumns, user, StateProvisioning, sn))
		return err
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("create sandbox row for %s: %w", user, err)
	}
	return sb, nil
}

// ReportWake stores the next due time user's agent reported (nil: none).
func (s *Store) ReportWake(ctx context.Context, user string, at *time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET reported_wake_at = $2, reported_at = now() WHERE user_id = $1`, user, at)
	if err != nil {
		return fmt.Errorf("report wake of %s: %w", user, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("report wake of %s: %w", user, ErrNotFound)
	}
	return nil
}

// UpdateSandbox writes the mutable fields of a sandbox row but its token
// hash: a row read before a bind elsewhere and written back after it must
// not put the old hash back (SetSandboxToken writes it).
func (s *Store) UpdateSandbox(ctx context.Context, sb Sandbox) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET state = $2, container_id = $3, network_id = $4,
		endpoint = $5, last_active_at = $6, wake_at = $7, updated_at = now()
		WHERE user_id = $1`,
		sb.UserID, sb.State, sb.ContainerID, sb.NetworkID, sb.Endpoint, sb.LastActiveAt, sb.WakeAt)
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", sb.UserID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update sandbox %s: %w", sb.UserID, ErrNotFound)
	}
	return nil
}

// SetSandboxToken stores the hash of the gateway token user's agent is
// about to be given (a bind stores it first, under the user's lock).
func (s *Store) SetSandboxToken(ctx context.Context, user string, tokenHash []byte) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sandboxes SET token_hash = $2, updated_at = now() WHERE user_id = $1`, user, tokenHash)
	if err != nil {
		return fmt.Errorf("set the token of %s's sandbox: %w", user, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set the token of %s's sandbox: %w", user, ErrNotFound)
	}
	return nil
}

// DeleteSandbox removes a sandbox row (a reset).
func (s *Store) DeleteSandbox(ctx context.Context, user string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM sandboxes WHERE user_id = $1`, user); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", user, err)
	}
	return nil
}

// SandboxForToken returns the sandbox whose gateway token this is.
func (s *Store) SandboxForToken(ctx context.Context, token string) (Sandbox, error) {
	sb, err := scanSandbox(s.pool.QueryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE token_hash = $1`, HashToken(token)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Sandbox{}, ErrUnauthenticated
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("look up sandbox token: %w", err)
	}
	return sb, nil
}

// Audit records one lifecycle event.
func (s *Store) Audit(ctx context.Context, user, kind string, detail map[string]any) error {
	if detail == nil {
		detail = map[string]any{}
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("encode audit detail: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO audit_events (user_id, kind, detail) VALUES ($1, $2, $3)`, user, kind, b); err != nil {
		return fmt.Errorf("record audit event %s for %s: %w", kind, user, err)
	}
	return nil
}

// LockUser takes a session-scoped advisory lock for user so that two
// managers never provision the same user at once, and returns the function
// that frees it. If the manager dies, Postgres drops the connection and the
// lock with it.
func (s *Store) LockUser(ctx context.Context, user string) (release func(), err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock user %s: %w", user, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('affido:user:' || $1))`, user); err != nil {
		conn.Release()
		return nil, fmt.Errorf("lock user %s: %w", user, err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// A failed unlock closes the connection, which frees the lock too.
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext('affido:user:' || $1))`, user); err != nil {
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, nil
}

// RecordUsage adds one model call's tokens to the user's daily ledger.
func (s *Store) RecordUsage(ctx context.Context, user, model string, in, out int64) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO gateway_usage (user_id, model, day, input_tokens, output_tokens, calls)
		VALUES ($1, $2, current_date, $3, $4, 1)
		ON CONFLICT (user_id, model, day) DO UPDATE SET input_tokens = gateway_usage.input_tokens + EXCLUDED.input_tokens,
		output_tokens = gateway_usage.output_tokens + EXCLUDED.output_tokens, calls = gateway_usage.calls + 1`,
		user, model, in, out)
	if err != nil {
		return fmt.Errorf("record usage of %s: %w", user, err)
	}
	return nil
}

// Notification is one notification to deliver.
type Notification struct {
	ID     int64
	UserID string
	Key    string
	Text   string
	DueAt  *time.Time
	Kind   string // gatewayapi's Kind constants, or ""
	Agent  string // the agent it is from, or ""
	Tries  int
	URL    string // the user's notify_url at claim time
}

// EnqueueNotification stores n (its Key, Text, DueAt, Kind and Agent) for
// user once per (user, key) and reports whether it was new. With max or
// more of the user's notifications still pending it stores nothing and
// returns ErrQueueFull (a key already stored is still reported as not
// new). Two concurrent calls may pass the count together: the cap is soft
// by at most the concurrency.
func (s *Store) EnqueueNotification(ctx context.Context, user string, n Notification, max int) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO notifications (user_id, key, text, due_at, kind, agent)
		SELECT $1, $2, $3, $4, $6, $7
		WHERE (SELECT count(*) FROM notifications WHERE user_id = $1 AND status = 'pending') < $5
		ON CONFLICT (user_id, key) DO NOTHING`, user, n.Key, n.Text, n.DueAt, max, n.Kind, n.Agent)
	if err != nil {
		return false, fmt.Errorf("enqueue notification for %s: %w", user, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notifications WHERE user_id = $1 AND key = $2)`, user, n.Key).Scan(&exists); err != nil {
		return false, fmt.Errorf("enqueue notification for %s: %w", user, err)
	}
	if exists {
		return false, nil
	}
	return false, fmt.Errorf("enqueue notification for %s: %w", user, ErrQueueFull)
}

// DueNotifications returns pending notifications whose next attempt is
// due, whether or not their user has a notify URL (URL "": Web Push may
// still reach them).
func (s *Store) DueNotifications(ctx context.Context, limit int) ([]Notification, error) {
	rows, err := s.pool.Query(ctx, `SELECT n.id, n.user_id, n.key, n.text, n.due_at, n.kind, n.agent, n.tries, coalesce(u.notify_url, '')
		FROM notifications n LEFT JOIN users u ON u.id = n.user_id
		WHERE n.status = 'pending' AND n.next_attempt_at <= now() ORDER BY n.next_attempt_at LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("due notifications: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Notification, error) {
		var n Notification
		err := r.Scan(&n.ID, &n.UserID, &n.Key, &n.Text, &n.DueAt, &n.Kind, &n.Agent, &n.Tries, &n.URL)
		return n, err
	})
}

// RecordNotificationTry stores one delivery try and the notification's new
// state: delivered, pending again at next, or failed/no_endpoint.
func (s *Store) RecordNotificationTry(ctx context.Context, id int64, try int, code int, errText, status string, next time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var c any
		if code != 0 {
			c = code
		}
		if _, err := tx.Exec(ctx, `INSERT INTO notification_attempts (notification_id, try, status_code, error) VALUES ($1, $2, $3, $4)
			ON CONFLICT DO NOTHING`, id, try, c, errText); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE notifications SET tries = $2, status = $3, next_attempt_at = $4,
			delivered_at = CASE WHEN $3 = 'delivered' THEN now() ELSE delivered_at END WHERE id = $1`, id, try, status, next)
		return err
	})
}

// SetNotifyURL sets where a user's notifications go ("" for nowhere).
func (s *Store) SetNotifyURL(ctx context.Context, user, url string) error {
	if err := s.EnsureUser(ctx, user); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `UPDATE users SET notify_url = $2 WHERE id = $1`, user, url); err != nil {
		return fmt.Errorf("set notify url of %s: %w", user, err)
	}
	return nil
}
