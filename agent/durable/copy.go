package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Tables are the store's tables, in the order Copy fills them: every one
// a store writes (the lease, the schema version and SQLite's search index,
// which its trigger fills from entries, are each backend's own).
var Tables = []string{"durable_meta", "record_ids", "conversations", "entries", "tasks", "submissions", "usage", "settings", "notes"}

// ErrCopyMismatch is Copy's answer when the copy, read back, is not the
// source: nothing of it is committed.
var ErrCopyMismatch = errors.New("the copy differs from its source")

// Copy copies every table of the store in from into to, replacing what
// to holds, in one transaction of to: it reads each table back inside that
// transaction and commits only if every table holds exactly the source's
// rows (ErrCopyMismatch otherwise). Both databases must be at this build's
// schema (opened with OpenStore). It returns the rows copied. The source
// must not change meanwhile: nothing may have it open for writing.
func Copy(ctx context.Context, from, to DB) (int, error) {
	source := map[string][]Row{}
	rows := 0
	for _, table := range Tables {
		all, err := from.All(ctx, `SELECT * FROM `+table)
		if err != nil {
			return 0, fmt.Errorf("copy: read %s: %w", table, err)
		}
		source[table] = all
		rows += len(all)
	}
	err := to.Transaction(ctx, func(tx Executor) error {
		for _, table := range Tables {
			all := source[table]
			if q := clearSearch.in(to); q != "" && table == "entries" {
				if err := tx.Exec(ctx, q); err != nil {
					return fmt.Errorf("copy: empty the search index: %w", err)
				}
			}
			if err := tx.Run(ctx, `DELETE FROM `+table); err != nil {
				return fmt.Errorf("copy: empty %s: %w", table, err)
			}
			for _, row := range all {
				cols := make([]string, 0, len(row))
				for c := range row {
					cols = append(cols, c)
				}
				slices.Sort(cols)
				args := make([]any, len(cols))
				for i, c := range cols {
					args[i] = row[c]
				}
				q := fmt.Sprintf(`INSERT INTO %s (%s) VALUES (%s)`, table, strings.Join(cols, ", "),
					strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", "))
				if err := tx.Run(ctx, q, args...); err != nil {
					return fmt.Errorf("copy: write %s: %w", table, err)
				}
			}
			back, err := tx.All(ctx, `SELECT * FROM `+table)
			if err != nil {
				return fmt.Errorf("copy: read back %s: %w", table, err)
			}
			if !slices.Equal(canonical(back), canonical(all)) {
				return fmt.Errorf("%w: table %s has %d rows, the source %d", ErrCopyMismatch, table, len(back), len(all))
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return rows, nil
}

// Compare reports whether a and b hold the same rows in every table
// (ErrCopyMismatch naming the first that differs).
func Compare(ctx context.Context, a, b DB) error {
	for _, table := range Tables {
		ra, err := a.All(ctx, `SELECT * FROM `+table)
		if err != nil {
			return err
		}
		rb, err := b.All(ctx, `SELECT * FROM `+table)
		if err != nil {
			return err
		}
		if !slices.Equal(canonical(ra), canonical(rb)) {
			return fmt.Errorf("%w: table %s (%d rows and %d)", ErrCopyMismatch, table, len(ra), len(rb))
		}
	}
	return nil
}

// canonical is rows as sorted JSON texts: the same rows in any order, from
// either backend, give the same list.
func canonical(rows []Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		m := make(map[string]any, len(r))
		for k, v := range r {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			m[k] = v
		}
		b, _ := json.Marshal(m) // sorted keys; the values are ints, strings and nil
		out[i] = string(b)
	}
	slices.Sort(out)
	return out
}
