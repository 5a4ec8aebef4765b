package spend

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Ledger reserves the worst case of a call before it runs and settles it
// to what it cost after. Reservations of one user are serialized, so
// concurrent calls can never together pass a limit: a reservation counts
// in full until it is settled.
type Ledger interface {
	// Reserve records micros against user's spend today and this month,
	// or returns an error wrapping ErrLimit when either would pass its
	// limit (the user's own limits if set, else def; today's is doubled
	// once the owner allowed another day).
	Reserve(ctx context.Context, user, model string, micros int64, def Limits) (id int64, err error)
	// Settle replaces reservation id by what the call cost; an error
	// wrapping ErrNotOpen when it is not open (settled already, or none).
	Settle(ctx context.Context, id, micros int64) error
}

// Memory is a Ledger in memory, for tests and development without
// Postgres. The registry's is the one the manager uses.
type Memory struct {
	mu     sync.Mutex
	rows   []memRow
	Limits map[string]Limits // per-user limits; absent: the defaults
	Raised map[string]bool   // users who allowed another day today
	Now    func() time.Time
}

type memRow struct {
	user    string
	at      time.Time
	micros  int64
	settled bool
}

var _ Ledger = (*Memory)(nil)

func (m *Memory) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Reserve implements Ledger.
func (m *Memory) Reserve(_ context.Context, user, _ string, micros int64, def Limits) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lim := def
	if l, ok := m.Limits[user]; ok {
		lim = l
	}
	if m.Raised[user] {
		lim.Daily *= 2
	}
	now := m.now().UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	var today, thisMonth int64
	for _, r := range m.rows {
		if r.user != user {
			continue
		}
		if !r.at.Before(day) {
			today += r.micros
		}
		if !r.at.Before(month) {
			thisMonth += r.micros
		}
	}
	if err := CheckLimits(today, thisMonth, micros, lim); err != nil {
		return 0, err
	}
	m.rows = append(m.rows, memRow{user: user, at: now, micros: micros})
	return int64(len(m.rows)), nil
}

// Settle implements Ledger.
func (m *Memory) Settle(_ context.Context, id, micros int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id < 1 || int(id) > len(m.rows) || m.rows[id-1].settled {
		return fmt.Errorf("settle %d: %w", id, ErrNotOpen)
	}
	m.rows[id-1].micros, m.rows[id-1].settled = micros, true
	return nil
}

// Spent returns what user has spent or reserved today.
func (m *Memory) Spent(user string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, r := range m.rows {
		if r.user == user {
			n += r.micros
		}
	}
	return n
}
