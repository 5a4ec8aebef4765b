package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"
)

// PoolSandbox is one warm-pool sandbox: made ahead of need, nobody's yet.
type PoolSandbox struct {
	Name        string
	State       string // StateProvisioning while it is built, PoolReady once its agent answered and it waits
	Subnet      netip.Prefix
	Image       string // the agent image it was made from
	ContainerID string
	NetworkID   string
	CreatedAt   time.Time
}

// PoolReady is the state of a pool sandbox that can be claimed.
const PoolReady = "ready"

const poolColumns = `name, state, subnet, image, container_id, network_id, created_at`

func scanPool(row pgx.Row) (PoolSandbox, error) {
	var p PoolSandbox
	err := row.Scan(&p.Name, &p.State, &p.Subnet, &p.Image, &p.ContainerID, &p.NetworkID, &p.CreatedAt)
	return p, err
}

// CreatePoolSandbox reserves a pool row named name, in state provisioning,
// with a subnet chosen by pick. The row comes before any Docker object, so
// whatever a crash leaves half made is found by its name again.
func (s *Store) CreatePoolSandbox(ctx context.Context, name, image string, pick SubnetPicker) (PoolSandbox, error) {
	var p PoolSandbox
	err := s.withSubnet(ctx, pick, func(tx pgx.Tx, sn netip.Prefix) error {
		var err error
		p, err = scanPool(tx.QueryRow(ctx, `INSERT INTO pool_sandboxes (name, state, subnet, image) VALUES ($1, $2, $3, $4)
			RETURNING `+poolColumns, name, StateProvisioning, sn, image))
		return err
	})
	if err != nil {
		return PoolSandbox{}, fmt.Errorf("create pool row %s: %w", name, err)
	}
	return p, nil
}

// PoolSandboxes returns every pool row, oldest first.
func (s *Store) PoolSandboxes(ctx context.Context) ([]PoolSandbox, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+poolColumns+` FROM pool_sandboxes ORDER BY created_at, name`)
	if err != nil {
		return nil, fmt.Errorf("list pool sandboxes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PoolSandbox, error) { return scanPool(r) })
	if err != nil {
		return nil, fmt.Errorf("list pool sandboxes: %w", err)
	}
	return out, nil
}

// UpdatePoolSandbox writes a pool row's state and object ids.
func (s *Store) UpdatePoolSandbox(ctx context.Context, p PoolSandbox) error {
	tag, err := s.pool.Exec(ctx, `UPDATE pool_sandboxes SET state = $2, container_id = $3, network_id = $4, updated_at = now()
		WHERE name = $1`, p.Name, p.State, p.ContainerID, p.NetworkID)
	if err != nil {
		return fmt.Errorf("update pool sandbox %s: %w", p.Name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update pool sandbox %s: %w", p.Name, ErrNotFound)
	}
	return nil
}

// DeletePoolSandbox removes a pool row. It reports ErrNotFound when the
// row is gone (claimed meanwhile), so a caller retiring a pool sandbox
// never removes one a user has just been given.
func (s *Store) DeletePoolSandbox(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM pool_sandboxes WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete pool sandbox %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete pool sandbox %s: %w", name, ErrNotFound)
	}
	return nil
}

// ClaimPoolSandbox binds the oldest ready pool sandbox made from image to
// user, who must have no sandbox yet: in one transaction the pool row is
// deleted and the user's sandbox row written with the pool sandbox's name,
// subnet and objects, and tokenHash. It returns ErrNotFound when no pool
// sandbox is ready. Two managers claiming at once take different rows
// (SKIP LOCKED); a second claim for one user fails on the primary key.
func (s *Store) ClaimPoolSandbox(ctx context.Context, user, image string, tokenHash []byte) (Sandbox, error) {
	var sb Sandbox
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING`, user); err != nil {
			return err
		}
		var err error
		sb, err = scanSandbox(tx.QueryRow(ctx, `WITH p AS (
				DELETE FROM pool_sandboxes WHERE name = (
					SELECT name FROM pool_sandboxes WHERE state = 'ready' AND image = $2
					ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
				RETURNING name, subnet, container_id, network_id)
			INSERT INTO sandboxes (user_id, name, state, subnet, container_id, network_id, token_hash)
			SELECT $1, p.name, $3, p.subnet, p.container_id, p.network_id, $4 FROM p
			RETURNING `+sandboxColumns, user, image, StatePaused, tokenHash))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Sandbox{}, ErrNotFound
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("claim a pool sandbox for %s: %w", user, err)
	}
	return sb, nil
}
