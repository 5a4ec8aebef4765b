package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUserExists is returned when a sign-up names a user that exists.
var ErrUserExists = errors.New("user exists")

// ErrBadInvite is returned for an invite code that is unknown, used,
// expired, or for another user.
var ErrBadInvite = errors.New("invalid invite")

// SessionInfo is a web session as its owner sees it (never its token).
type SessionInfo struct {
	ID         int64     `json:"id"`
	UserAgent  string    `json:"user_agent"`
	CreatedAt  time.Time `json:"created_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Current    bool      `json:"current,omitempty"`
}

// TokenInfo is an API token as its owner sees it (never the token).
type TokenInfo struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// PasswordHash returns user's password hash, or ErrUnauthenticated when
// the user does not exist or has no password.
func (s *Store) PasswordHash(ctx context.Context, user string) (string, error) {
	var h *string
	err := s.pool.QueryRow(ctx, `SELECT password_hash FROM users WHERE id = $1`, user).Scan(&h)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && h == nil) {
		return "", ErrUnauthenticated
	}
	if err != nil {
		return "", fmt.Errorf("read password of %s: %w", user, err)
	}
	return *h, nil
}

// SetPassword creates the user if needed and sets their password hash;
// the user's web sessions end (a new password signs everyone out).
func (s *Store) SetPassword(ctx context.Context, user, hash string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO users (id, password_hash) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET password_hash = EXCLUDED.password_hash`, user, hash); err != nil {
			return fmt.Errorf("set password of %s: %w", user, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM session WHERE user_id = $1`, user); err != nil {
			return fmt.Errorf("end the sessions of %s: %w", user, err)
		}
		return nil
	})
}

// CreateUser creates a user with a password; ErrUserExists if the id is taken.
func (s *Store) CreateUser(ctx context.Context, user, hash string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO users (id, password_hash) VALUES ($1, $2)`, user, hash)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return fmt.Errorf("create user %s: %w", user, ErrUserExists)
	}
	if err != nil {
		return fmt.Errorf("create user %s: %w", user, err)
	}
	return nil
}

// CreateSession stores a new web session for user and returns its token
// (shown this once; only its hash is stored).
func (s *Store) CreateSession(ctx context.Context, user, userAgent string, ttl time.Duration) (string, error) {
	token := NewToken()
	if len(userAgent) > 300 {
		userAgent = userAgent[:300]
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO session (token_hash, user_id, expires_at, user_agent) VALUES ($1, $2, $3, $4)`,
		HashToken(token), user, time.Now().Add(ttl), userAgent)
	if err != nil {
		return "", fmt.Errorf("create session for %s: %w", user, err)
	}
	return token, nil
}

// DeleteSession ends the session of token (sign-out); an unknown token is no error.
func (s *Store) DeleteSession(ctx context.Context, token string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM session WHERE token_hash = $1`, HashToken(token)); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// Sessions lists user's unexpired sessions, newest first; current marks
// the one of token.
func (s *Store) Sessions(ctx context.Context, user, token string) ([]SessionInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, user_agent, created_at, last_seen_at, expires_at, token_hash = $2
		FROM session WHERE user_id = $1 AND expires_at > now() ORDER BY created_at DESC, id DESC`, user, HashToken(token))
	if err != nil {
		return nil, fmt.Errorf("list sessions of %s: %w", user, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SessionInfo, error) {
		var si SessionInfo
		err := r.Scan(&si.ID, &si.UserAgent, &si.CreatedAt, &si.LastSeenAt, &si.ExpiresAt, &si.Current)
		return si, err
	})
	if err != nil {
		return nil, fmt.Errorf("list sessions of %s: %w", user, err)
	}
	return out, nil
}

// RevokeSession deletes one of user's sessions (ErrNotFound if user has no such session).
func (s *Store) RevokeSession(ctx context.Context, user string, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM session WHERE user_id = $1 AND id = $2`, user, id)
	if err != nil {
		return fmt.Errorf("revoke session %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("session %d: %w", id, ErrNotFound)
	}
	return nil
}

// CreateNamedToken returns a new API token for user (shown this once;
// only its hash is stored) and its record.
func (s *Store) CreateNamedToken(ctx context.Context, user, name string) (TokenInfo, string, error) {
	token := NewToken()
	ti := TokenInfo{Name: name}
	err := s.pool.QueryRow(ctx, `INSERT INTO api_tokens (token_hash, user_id, name) VALUES ($1, $2, $3) RETURNING id, created_at`,
		HashToken(token), user, name).Scan(&ti.ID, &ti.CreatedAt)
	if err != nil {
		return ti, "", fmt.Errorf("create api token for %s: %w", user, err)
	}
	return ti, token, nil
}

// Tokens lists user's API tokens, newest first.
func (s *Store) Tokens(ctx context.Context, user string) ([]TokenInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name, created_at, last_used_at FROM api_tokens WHERE user_id = $1 ORDER BY id DESC`, user)
	if err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", user, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenInfo, error) {
		var ti TokenInfo
		err := r.Scan(&ti.ID, &ti.Name, &ti.CreatedAt, &ti.LastUsedAt)
		return ti, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", user, err)
	}
	return out, nil
}

// RevokeToken deletes one of user's API tokens (ErrNotFound if there is none).
func (s *Store) RevokeToken(ctx context.Context, user string, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM api_tokens WHERE user_id = $1 AND id = $2`, user, id)
	if err != nil {
		return fmt.Errorf("revoke token %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("token %d: %w", id, ErrNotFound)
	}
	return nil
}

// CreateInvite returns a code that lets its holder create user (once,
// before ttl passes); only the code's hash is stored.
func (s *Store) CreateInvite(ctx context.Context, user string, ttl time.Duration) (string, error) {
	code := NewToken()
	if _, err := s.pool.Exec(ctx, `INSERT INTO invites (code_hash, user_id, expires_at) VALUES ($1, $2, $3)`,
		HashToken(code), user, time.Now().Add(ttl)); err != nil {
		return "", fmt.Errorf("create invite for %s: %w", user, err)
	}
	return code, nil
}

// SignUp creates user with a password hash: with an invite code, which
// must be unused, unexpired and for that user (ErrBadInvite), used up in
// the same transaction (it may also give a password to an existing user
// who has none); without one only when open is set (ErrBadInvite
// otherwise), and only for a new id. ErrUserExists if the id is taken.
func (s *Store) SignUp(ctx context.Context, user, hash, invite string, open bool) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if invite != "" {
			tag, err := tx.Exec(ctx, `UPDATE invites SET used_at = now()
				WHERE code_hash = $1 AND user_id = $2 AND used_at IS NULL AND expires_at > now()`, HashToken(invite), user)
			if err != nil {
				return fmt.Errorf("use invite: %w", err)
			}
			if tag.RowsAffected() == 0 {
				return ErrBadInvite
			}
		} else if !open {
			return ErrBadInvite
		}
		// An invite may give a password to a user the operator made
		// without one; open sign-up never takes over an existing id.
		q := `INSERT INTO users (id, password_hash) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`
		if invite != "" {
			q = `INSERT INTO users (id, password_hash) VALUES ($1, $2)
				ON CONFLICT (id) DO UPDATE SET password_hash = EXCLUDED.password_hash WHERE users.password_hash IS NULL`
		}
		tag, err := tx.Exec(ctx, q, user, hash)
		if err != nil {
			return fmt.Errorf("sign up %s: %w", user, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("sign up %s: %w", user, ErrUserExists)
		}
		return nil
	})
}

// AuditEvent is one lifecycle change of a user's sandbox.
type AuditEvent struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	Kind   string         `json:"kind"`
	Detail map[string]any `json:"detail"`
}

// NotificationView is a notification and its delivery tries.
type NotificationView struct {
	ID          int64      `json:"id"`
	Text        string     `json:"text"`
	CreatedAt   time.Time  `json:"created_at"`
	Status      string     `json:"status"`
	Tries       int        `json:"tries"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
}

// Activity is what the manager knows a user's sandbox did: its lifecycle
// events and its notifications, newest first.
type Activity struct {
	Events        []AuditEvent       `json:"events"`
	Notifications []NotificationView `json:"notifications"`
}

// Activity returns up to limit of each, newest first.
func (s *Store) Activity(ctx context.Context, user string, limit int) (Activity, error) {
	a := Activity{Events: []AuditEvent{}, Notifications: []NotificationView{}}
	rows, err := s.pool.Query(ctx, `SELECT id, at, kind, detail FROM audit_events WHERE user_id = $1 ORDER BY at DESC, id DESC LIMIT $2`, user, limit)
	if err != nil {
		return a, fmt.Errorf("activity of %s: %w", user, err)
	}
	a.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEvent, error) {
		var e AuditEvent
		err := r.Scan(&e.ID, &e.At, &e.Kind, &e.Detail)
		return e, err
	})
	if err != nil {
		return a, fmt.Errorf("activity of %s: %w", user, err)
	}
	rows, err = s.pool.Query(ctx, `SELECT n.id, n.text, n.created_at, n.status, n.tries, n.delivered_at,
		coalesce((SELECT error FROM notification_attempts t WHERE t.notification_id = n.id ORDER BY try DESC LIMIT 1), '')
		FROM notifications n WHERE n.user_id = $1 ORDER BY n.created_at DESC, n.id DESC LIMIT $2`, user, limit)
	if err != nil {
		return a, fmt.Errorf("notifications of %s: %w", user, err)
	}
	a.Notifications, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (NotificationView, error) {
		var n NotificationView
		err := r.Scan(&n.ID, &n.Text, &n.CreatedAt, &n.Status, &n.Tries, &n.DeliveredAt, &n.LastError)
		return n, err
	})
	if err != nil {
		return a, fmt.Errorf("notifications of %s: %w", user, err)
	}
	return a, nil
}

// NotifyURL returns where a user's notifications go ("" for nowhere).
func (s *Store) NotifyURL(ctx context.Context, user string) (string, error) {
	var u string
	err := s.pool.QueryRow(ctx, `SELECT notify_url FROM users WHERE id = $1`, user).Scan(&u)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("notify url of %s: %w", user, err)
	}
	return u, nil
}
