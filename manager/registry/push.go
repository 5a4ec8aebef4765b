package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PushSubscription is a browser's Web Push subscription (what its push
// manager hands the page), kept for the web session that made it.
type PushSubscription struct {
	ID       int64
	UserID   string
	Endpoint string // the push service's URL for this browser
	P256dh   []byte // the browser's P-256 public key, uncompressed (65 bytes)
	Auth     []byte // the browser's authentication secret (16 bytes)
}

// PushSubscriptionInfo is a subscription as its owner sees it (never its keys).
type PushSubscriptionInfo struct {
	ID         int64      `json:"id"`
	Endpoint   string     `json:"endpoint"`
	CreatedAt  time.Time  `json:"created_at"`
	LastSentAt *time.Time `json:"last_sent_at,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	Current    bool       `json:"current,omitempty"` // made by the session asking
}

// VAPIDKeys returns the stored VAPID key pair (private scalar, uncompressed
// public key). While none is stored it stores priv and pub, a pair the
// caller made, first: concurrent callers all get the pair stored first.
func (s *Store) VAPIDKeys(ctx context.Context, priv, pub []byte) (storedPriv, storedPub []byte, err error) {
	if _, err := s.pool.Exec(ctx, `INSERT INTO vapid_keys (private_key, public_key) VALUES ($1, $2) ON CONFLICT DO NOTHING`, priv, pub); err != nil {
		return nil, nil, fmt.Errorf("store vapid keys: %w", err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT private_key, public_key FROM vapid_keys`).Scan(&storedPriv, &storedPub); err != nil {
		return nil, nil, fmt.Errorf("read vapid keys: %w", err)
	}
	return storedPriv, storedPub, nil
}

// ErrEndpointTaken is returned for a push endpoint another user holds,
// claimed without that subscription's keys.
var ErrEndpointTaken = errors.New("the push endpoint belongs to another user's subscription")

// PutPushSubscription stores sub (its Endpoint, P256dh and Auth) for
// user's unexpired web session whose token is session, and returns its id.
// An endpoint stored already is one browser subscribing again: it moves to
// this session with the new keys, if it is user's, or if it comes with the
// keys it has (the browser that holds them, signed in as another user);
// else ErrEndpointTaken (someone who learned another's endpoint cannot
// take its pushes). Then user's oldest subscriptions past
// max are dropped. ErrUnauthenticated when user has no such session.
func (s *Store) PutPushSubscription(ctx context.Context, user, session string, sub PushSubscription, max int) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO push_subscriptions (user_id, session_id, endpoint, p256dh, auth)
			SELECT user_id, id, $3, $4, $5 FROM session WHERE token_hash = $1 AND user_id = $2 AND expires_at > now()
			ON CONFLICT (endpoint) DO UPDATE SET user_id = EXCLUDED.user_id, session_id = EXCLUDED.session_id,
				p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth, created_at = now(), last_sent_at = NULL, last_error = ''
			WHERE push_subscriptions.user_id = EXCLUDED.user_id
				OR (push_subscriptions.p256dh = EXCLUDED.p256dh AND push_subscriptions.auth = EXCLUDED.auth)
			RETURNING id`, HashToken(session), user, sub.Endpoint, sub.P256dh, sub.Auth).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			// No session, or the endpoint is another user's and these are
			// not its keys: only that browser (which holds them) moves it.
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM session WHERE token_hash = $1 AND user_id = $2 AND expires_at > now()`,
				HashToken(session), user).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return ErrUnauthenticated
			}
			return ErrEndpointTaken
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM push_subscriptions WHERE user_id = $1 AND id NOT IN
			(SELECT id FROM push_subscriptions WHERE user_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2)`, user, max)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store push subscription of %s: %w", user, err)
	}
	return id, nil
}

// DeletePushSubscription deletes user's subscription of endpoint; another
// user's, or none, is no error and deletes nothing.
func (s *Store) DeletePushSubscription(ctx context.Context, user, endpoint string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM push_subscriptions WHERE user_id = $1 AND endpoint = $2`, user, endpoint); err != nil {
		return fmt.Errorf("delete push subscription of %s: %w", user, err)
	}
	return nil
}

// PushSubscriptionInfos lists user's subscriptions, newest first; current
// marks those of the session whose token is session.
func (s *Store) PushSubscriptionInfos(ctx context.Context, user, session string) ([]PushSubscriptionInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT p.id, p.endpoint, p.created_at, p.last_sent_at, p.last_error, s.token_hash = $2
		FROM push_subscriptions p JOIN session s ON s.id = p.session_id
		WHERE p.user_id = $1 ORDER BY p.created_at DESC, p.id DESC`, user, HashToken(session))
	if err != nil {
		return nil, fmt.Errorf("list push subscriptions of %s: %w", user, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PushSubscriptionInfo, error) {
		var p PushSubscriptionInfo
		err := r.Scan(&p.ID, &p.Endpoint, &p.CreatedAt, &p.LastSentAt, &p.LastError, &p.Current)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list push subscriptions of %s: %w", user, err)
	}
	return out, nil
}

// PushSubscriptions returns what delivery needs of user's subscriptions
// whose session has not expired (an expired session's browser is signed
// out, like one that signed out).
func (s *Store) PushSubscriptions(ctx context.Context, user string) ([]PushSubscription, error) {
	rows, err := s.pool.Query(ctx, `SELECT p.id, p.user_id, p.endpoint, p.p256dh, p.auth
		FROM push_subscriptions p JOIN session s ON s.id = p.session_id
		WHERE p.user_id = $1 AND s.expires_at > now() ORDER BY p.id`, user)
	if err != nil {
		return nil, fmt.Errorf("push subscriptions of %s: %w", user, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PushSubscription, error) {
		var p PushSubscription
		err := r.Scan(&p.ID, &p.UserID, &p.Endpoint, &p.P256dh, &p.Auth)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("push subscriptions of %s: %w", user, err)
	}
	return out, nil
}

// DropPushSubscription deletes subscription id, if it still has endpoint:
// its push service said it is gone (404, 410).
func (s *Store) DropPushSubscription(ctx context.Context, id int64, endpoint string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM push_subscriptions WHERE id = $1 AND endpoint = $2`, id, endpoint); err != nil {
		return fmt.Errorf("drop push subscription %d: %w", id, err)
	}
	return nil
}

// RecordPushTry records a push to subscription id: sent (errText "") or
// why not.
func (s *Store) RecordPushTry(ctx context.Context, id int64, errText string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE push_subscriptions SET last_error = $2,
		last_sent_at = CASE WHEN $2 = '' THEN now() ELSE last_sent_at END WHERE id = $1`, id, errText); err != nil {
		return fmt.Errorf("record push try of subscription %d: %w", id, err)
	}
	return nil
}
