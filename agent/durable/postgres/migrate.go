package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/affido/affido/agent/durable"
)

// migrationFiles are the agent's schema on Postgres, one file per schema
// version, numbered as schema.go's SQLite migrations are (the schema is
// data: the same versions, each spelled for its database).
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations returns the files' names in order.
func migrations() []string {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		panic(err) // a fixed pattern
	}
	sort.Strings(names)
	return names
}

// Migrate brings the agent's schema in dsn to the version this build
// writes, creating the schema if needed; the deploy runs it, the agent
// never does. It refuses a schema newer than this build.
func Migrate(ctx context.Context, dsn, schema string) error {
	return MigrateWith(ctx, dsn, schema, nil)
}

// MigrateWith is Migrate with config adjusting the connection's
// configuration, as Options.Config does Open's (the agent in a sandbox
// dials through the gateway).
func MigrateWith(ctx context.Context, dsn, schema string, config func(*pgx.ConnConfig)) error {
	return migrateTo(ctx, dsn, schema, len(migrations()), config)
}

func migrateTo(ctx context.Context, dsn, schema string, target int, config func(*pgx.ConnConfig)) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", schema, err)
	}
	if config != nil {
		config(cfg)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", schema, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	files := migrations()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		id := pgx.Identifier{schema}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+id+`; SET LOCAL search_path TO `+id+`;
			CREATE TABLE IF NOT EXISTS durable_schema (singleton INTEGER PRIMARY KEY CHECK (singleton = 1), version INTEGER NOT NULL);
			LOCK TABLE durable_schema`); err != nil {
			return fmt.Errorf("migrate %s: %w", schema, err)
		}
		current := 0
		if err := tx.QueryRow(ctx, `SELECT version FROM durable_schema WHERE singleton = 1`).Scan(&current); err != nil && err != pgx.ErrNoRows {
			return fmt.Errorf("migrate %s: read version: %w", schema, err)
		}
		if current > len(files) {
			return fmt.Errorf("migrate %s: %w: the database is at version %d, this build knows up to %d", schema, durable.ErrSchemaTooNew, current, len(files))
		}
		for v := current + 1; v <= target; v++ {
			sql, err := migrationFiles.ReadFile(files[v-1])
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return fmt.Errorf("migrate %s to version %d (%s): %w", schema, v, files[v-1], err)
			}
		}
		if target > current {
			if _, err := tx.Exec(ctx, `INSERT INTO durable_schema (singleton, version) VALUES (1, $1)
				ON CONFLICT (singleton) DO UPDATE SET version = excluded.version`, target); err != nil {
				return fmt.Errorf("migrate %s: write version: %w", schema, err)
			}
		}
		return nil
	})
}
