// Package migrations holds the registry schema as numbered SQL files
// (NNNN_name.sql), embedded into the binary and applied in order, once each.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
