package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/affido/affido/manager/spend"
)

var _ spend.Ledger = (*Store)(nil)

// Reserve implements spend.Ledger: under the user's advisory lock, it sums
// today's and this month's spend (settled calls at their cost, open ones
// at their reservation) and records micros if both stay within limits.
func (s *Store) Reserve(ctx context.Context, user, model string, micros int64, def spend.Limits) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('spend:' || $1, 0))`, user); err != nil {
			return err
		}
		lim, err := limits(ctx, tx, user, def)
		if err != nil {
			return err
		}
		var today, month int64
		err = tx.QueryRow(ctx, `SELECT
			coalesce(sum(CASE WHEN settled THEN cost_micros ELSE reserved_micros END) FILTER (WHERE at >= date_trunc('day', now())), 0),
			coalesce(sum(CASE WHEN settled THEN cost_micros ELSE reserved_micros END), 0)
			FROM spend WHERE user_id = $1 AND at >= date_trunc('month', now())`, user).Scan(&today, &month)
		if err != nil {
			return err
		}
		if err := spend.CheckLimits(today, month, micros, lim); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO spend (user_id, model, reserved_micros) VALUES ($1, $2, $3) RETURNING id`,
			user, model, micros).Scan(&id)
	})
	if err != nil {
		return 0, fmt.Errorf("reserve spend for %s: %w", user, err)
	}
	return id, nil
}

// Settle implements spend.Ledger.
func (s *Store) Settle(ctx context.Context, id, micros int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE spend SET cost_micros = $2, settled = true WHERE id = $1 AND NOT settled`, id, micros)
	if err != nil {
		return fmt.Errorf("settle spend %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("settle spend %d: %w (%w)", id, spend.ErrNotOpen, ErrNotFound)
	}
	return nil
}

// limits returns user's effective limits today.
func limits(ctx context.Context, q pgx.Tx, user string, def spend.Limits) (spend.Limits, error) {
	var daily, monthly *int64
	var raisedToday bool
	err := q.QueryRow(ctx, `SELECT daily_micros, monthly_micros, coalesce(raised_on = current_date, false)
		FROM spend_limits WHERE user_id = $1`, user).Scan(&daily, &monthly, &raisedToday)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return spend.Limits{}, err
	}
	lim := def
	if daily != nil {
		lim.Daily = *daily
	}
	if monthly != nil {
		lim.Monthly = *monthly
	}
	if raisedToday {
		lim.Daily *= 2
	}
	return lim, nil
}

// SpendReport is what a user spent today and this month, by model, and
// their limits (micro-dollars).
type SpendReport struct {
	Today   map[string]int64 `json:"today_micros"`
	Month   map[string]int64 `json:"month_micros"`
	Daily   int64            `json:"daily_limit_micros"`
	Monthly int64            `json:"monthly_limit_micros"`
	Raised  bool             `json:"another_day_allowed_today"`
}

// Spend reports user's spend.
func (s *Store) Spend(ctx context.Context, user string, def spend.Limits) (SpendReport, error) {
	r := SpendReport{Today: map[string]int64{}, Month: map[string]int64{}}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		lim, err := limits(ctx, tx, user, def)
		if err != nil {
			return err
		}
		r.Daily, r.Monthly = lim.Daily, lim.Monthly
		if err := tx.QueryRow(ctx, `SELECT coalesce((SELECT raised_on = current_date FROM spend_limits WHERE user_id = $1), false)`, user).Scan(&r.Raised); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT model,
			coalesce(sum(CASE WHEN settled THEN cost_micros ELSE reserved_micros END) FILTER (WHERE at >= date_trunc('day', now())), 0),
			coalesce(sum(CASE WHEN settled THEN cost_micros ELSE reserved_micros END), 0)
			FROM spend WHERE user_id = $1 AND at >= date_trunc('month', now()) GROUP BY model`, user)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var model string
			var today, month int64
			if err := rows.Scan(&model, &today, &month); err != nil {
				return err
			}
			if today > 0 {
				r.Today[model] = today
			}
			r.Month[model] = month
		}
		return rows.Err()
	})
	if err != nil {
		return SpendReport{}, fmt.Errorf("spend of %s: %w", user, err)
	}
	return r, nil
}

// SetSpendLimits sets user's own limits; nil leaves one as it is.
func (s *Store) SetSpendLimits(ctx context.Context, user string, daily, monthly *int64) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO spend_limits (user_id, daily_micros, monthly_micros) VALUES ($1, $2, $3)
		ON CONFLICT (user_id) DO UPDATE SET daily_micros = coalesce($2, spend_limits.daily_micros),
		monthly_micros = coalesce($3, spend_limits.monthly_micros)`, user, daily, monthly)
	if err != nil {
		return fmt.Errorf("set spend limits of %s: %w", user, err)
	}
	return nil
}

// AllowAnotherDay doubles user's limit for today, once a day; a second
// time returns spend.ErrAlreadyRaised.
func (s *Store) AllowAnotherDay(ctx context.Context, user string) error {
	tag, err := s.pool.Exec(ctx, `INSERT INTO spend_limits (user_id, raised_on) VALUES ($1, current_date)
		ON CONFLICT (user_id) DO UPDATE SET raised_on = current_date
		WHERE spend_limits.raised_on IS DISTINCT FROM current_date`, user)
	if err != nil {
		return fmt.Errorf("allow another day for %s: %w", user, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("allow another day for %s: %w", user, spend.ErrAlreadyRaised)
	}
	return nil
}
