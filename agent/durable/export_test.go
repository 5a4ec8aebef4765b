package durable

// MigrateTo exposes migrate so tests can write a database as an older build would.
var MigrateTo = migrate

// SetBeforeDecideCommit sets what runs between Decide's read and its commit.
func SetBeforeDecideCommit(f func()) { beforeDecideCommit = f }
