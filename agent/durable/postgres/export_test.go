package postgres

import "context"

// MigrateTo migrates to a given version (a database behind this build).
func MigrateTo(ctx context.Context, dsn, schema string, target int) error {
	return migrateTo(ctx, dsn, schema, target, nil)
}

// Freeze stops the idle renewal, as a frozen process would: the lease then
// runs out unless a transaction renews it.
func (d *DB) Freeze() { d.stopRenewing() }
