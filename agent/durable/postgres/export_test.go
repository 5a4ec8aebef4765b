package postgres

// MigrateTo migrates to a given version (a database behind this build).
var MigrateTo = migrateTo

// Freeze stops the idle renewal, as a frozen process would: the lease then
// runs out unless a transaction renews it.
func (d *DB) Freeze() { d.stopRenewing() }
