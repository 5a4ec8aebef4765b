package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/affido/affido/manager/connectors"
)

var _ connectors.Store = (*Store)(nil)

const connectorColumns = `id, user_id, agent, name, url, header_name, secret, tools, created_at, listed_at`

func scanConnector(row pgx.Row) (connectors.Connector, error) {
	var c connectors.Connector
	var tools []byte
	var listed *time.Time
	if err := row.Scan(&c.ID, &c.User, &c.Agent, &c.Name, &c.URL, &c.HeaderName, &c.Secret, &tools, &c.CreatedAt, &listed); err != nil {
		return c, err
	}
	if err := json.Unmarshal(tools, &c.Tools); err != nil {
		return c, fmt.Errorf("connector %d: tools: %w", c.ID, err)
	}
	if c.Tools == nil {
		c.Tools = []connectors.Tool{}
	}
	if listed != nil {
		c.ListedAt = *listed
	}
	c.HasSecret = c.Secret != ""
	return c, nil
}

// AddConnector stores c; connectors.ErrExists for a second of the same
// user, agent and name.
func (s *Store) AddConnector(ctx context.Context, c connectors.Connector) (connectors.Connector, error) {
	tools, err := json.Marshal(nonNil(c.Tools))
	if err != nil {
		return c, err
	}
	var listed *time.Time
	if !c.ListedAt.IsZero() {
		listed = &c.ListedAt
	}
	out, err := scanConnector(s.pool.QueryRow(ctx, `INSERT INTO connectors (user_id, agent, name, url, header_name, secret, tools, listed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+connectorColumns,
		c.User, c.Agent, c.Name, c.URL, c.HeaderName, c.Secret, tools, listed))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return c, connectors.ErrExists
	}
	if err != nil {
		return c, fmt.Errorf("add connector: %w", err)
	}
	return out, nil
}

func nonNil(t []connectors.Tool) []connectors.Tool {
	if t == nil {
		return []connectors.Tool{}
	}
	return t
}

// Connectors lists user's connectors, of agent unless agent is "".
func (s *Store) Connectors(ctx context.Context, user, agent string) ([]connectors.Connector, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+connectorColumns+` FROM connectors
		WHERE user_id = $1 AND ($2 = '' OR agent = $2) ORDER BY agent, name`, user, agent)
	if err != nil {
		return nil, fmt.Errorf("list connectors: %w", err)
	}
	defer rows.Close()
	out := []connectors.Connector{}
	for rows.Next() {
		c, err := scanConnector(rows)
		if err != nil {
			return nil, fmt.Errorf("list connectors: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Connector returns one of user's connectors, or connectors.ErrNotFound.
func (s *Store) Connector(ctx context.Context, user string, id int64) (connectors.Connector, error) {
	c, err := scanConnector(s.pool.QueryRow(ctx, `SELECT `+connectorColumns+` FROM connectors WHERE user_id = $1 AND id = $2`, user, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, connectors.ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("read connector %d: %w", id, err)
	}
	return c, nil
}

// RemoveConnector deletes one of user's connectors, its secret with it.
func (s *Store) RemoveConnector(ctx context.Context, user string, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM connectors WHERE user_id = $1 AND id = $2`, user, id)
	if err != nil {
		return fmt.Errorf("remove connector %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return connectors.ErrNotFound
	}
	return nil
}

// UpdateTools rewrites one connector's tools under its row lock.
func (s *Store) UpdateTools(ctx context.Context, user string, id int64, listed time.Time, change func([]connectors.Tool) ([]connectors.Tool, error)) (connectors.Connector, error) {
	var out connectors.Connector
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		c, err := scanConnector(tx.QueryRow(ctx, `SELECT `+connectorColumns+` FROM connectors WHERE user_id = $1 AND id = $2 FOR UPDATE`, user, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return connectors.ErrNotFound
		}
		if err != nil {
			return err
		}
		tools, err := change(c.Tools)
		if err != nil {
			return err
		}
		raw, err := json.Marshal(nonNil(tools))
		if err != nil {
			return err
		}
		var at *time.Time
		if !listed.IsZero() {
			at = &listed
		}
		out, err = scanConnector(tx.QueryRow(ctx, `UPDATE connectors SET tools = $3, listed_at = coalesce($4, listed_at)
			WHERE user_id = $1 AND id = $2 RETURNING `+connectorColumns, user, id, raw, at))
		return err
	})
	if err != nil {
		return out, fmt.Errorf("update connector %d: %w", id, err)
	}
	return out, nil
}
