package durable

// MigrateTo exposes migrate so tests can write a database as an older build would.
var MigrateTo = migrate
