package postgres

// MigrateTo migrates to a given version (a database behind this build).
var MigrateTo = migrateTo
