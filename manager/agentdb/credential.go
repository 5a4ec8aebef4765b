package agentdb

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/affido/affido/internal/gatewayapi"
)

// ddlLock is the advisory lock key under which roles and grants change:
// past 32 bits, so none of the registry's (hashtext, 32-bit) is the same.
const ddlLock int64 = 0x6166_6669_646f_6462 // "affidodb"

// Limits of a user's role: a statement or a transaction left open cannot
// hold the cluster for long.
// They are the role's defaults: a session may change the first two for
// itself (Postgres has no way to forbid it), not temp_file_limit.
const (
	statementTimeout = "60s"
	idleInTxTimeout  = "60s"
	tempFileLimit    = "1GB"
)

var (
	roleName = regexp.MustCompile(`^agent_[0-9a-f]{16}$`)
	password = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Credential returns user's storage credential, making the role and the
// database on the first ask (and again if either went missing). Two
// managers asking at once agree: the row is inserted once, and a role or
// database the other made first is taken as made.
func (s *Store) Credential(ctx context.Context, user string) (gatewayapi.StorageCredential, error) {
	return s.credential(ctx, user, s.MakeOnAsk)
}

// Make is Credential that makes the user's storage whatever MakeOnAsk says
// (the admin moving a user to Postgres).
func (s *Store) Make(ctx context.Context, user string) (gatewayapi.StorageCredential, error) {
	return s.credential(ctx, user, true)
}

// ErrNotOffered is Credential's answer for a user without Postgres storage
// on a stack whose default is SQLite (MakeOnAsk false).
var ErrNotOffered = errors.New("this user's agents have no Postgres storage")

func (s *Store) credential(ctx context.Context, user string, mayMake bool) (gatewayapi.StorageCredential, error) {
	c, err := s.row(ctx, user)
	if errors.Is(err, pgx.ErrNoRows) && !mayMake {
		return gatewayapi.StorageCredential{}, ErrNotOffered
	}
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err = s.pool.Exec(ctx, `INSERT INTO agent_storage (user_id, role, password) VALUES ($1, $2, $3)
			ON CONFLICT (user_id) DO NOTHING`, user, "agent_"+randomHex(8), randomHex(32)); err == nil {
			c, err = s.row(ctx, user)
		}
	}
	if err != nil {
		return gatewayapi.StorageCredential{}, fmt.Errorf("agent storage of %s: %w", user, err)
	}
	if err := s.ensure(ctx, c); err != nil {
		return gatewayapi.StorageCredential{}, fmt.Errorf("agent storage of %s: %w", user, err)
	}
	return c, nil
}

// row reads user's credential (pgx.ErrNoRows: none yet).
func (s *Store) row(ctx context.Context, user string) (gatewayapi.StorageCredential, error) {
	var c gatewayapi.StorageCredential
	err := s.pool.QueryRow(ctx, `SELECT role, password FROM agent_storage WHERE user_id = $1`, user).Scan(&c.Role, &c.Password)
	c.Database = c.Role
	if err == nil && (!roleName.MatchString(c.Role) || !password.MatchString(c.Password)) {
		err = fmt.Errorf("the stored credential is malformed") // the table's CHECKs say otherwise
	}
	return c, err
}

// ensure makes c's role and database unless this process saw them made.
// Both are spelled into the statements (DDL takes no parameters): the
// table's CHECKs and row's own check keep them to hex.
func (s *Store) ensure(ctx context.Context, c gatewayapi.StorageCredential) error {
	s.mu.Lock()
	done, shut := s.ready[c.Role], s.shut
	s.mu.Unlock()
	if done {
		return nil
	}
	// One manager at a time changes roles and grants: Postgres fails two
	// concurrent changes of one catalog row ("tuple concurrently updated").
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, ddlLock); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, ddlLock)
	if !shut {
		if err := revokePublic(ctx, conn.Conn()); err != nil {
			return err
		}
		s.mu.Lock()
		s.shut = true
		s.mu.Unlock()
	}
	id := pgx.Identifier{c.Role}.Sanitize()
	var hasRole, hasDB bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1),
		EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, c.Role).Scan(&hasRole, &hasDB); err != nil {
		return err
	}
	if !hasRole {
		_, err := conn.Exec(ctx, `CREATE ROLE `+id+` LOGIN`)
		if err != nil && !isCode(err, "42710") { // duplicate_object: another manager made it
			return fmt.Errorf("create its role: %w", err)
		}
	}
	// Set on every first ask in a process, not only at creation: a role that
	// changed its own password or settings (its owner may) gets ours back.
	// The password goes as a SCRAM verifier, never as text a log could keep.
	verifier, err := scramVerifier(c.Password)
	if err != nil {
		return err
	}
	for _, q := range []string{
		fmt.Sprintf(`ALTER ROLE %s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS
			CONNECTION LIMIT %d PASSWORD '%s'`, id, MaxConnections, verifier),
		fmt.Sprintf(`ALTER ROLE %s SET statement_timeout = '%s'`, id, statementTimeout),
		fmt.Sprintf(`ALTER ROLE %s SET idle_in_transaction_session_timeout = '%s'`, id, idleInTxTimeout),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("set its role: %w", err)
		}
	}
	// Only a superuser may set this, and so only one may lift it; a manager
	// that is no superuser (CREATEROLE CREATEDB) goes without.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER ROLE %s SET temp_file_limit = '%s'`, id, tempFileLimit)); err != nil && !isCode(err, "42501") {
		return fmt.Errorf("set its role: %w", err)
	}
	if !hasDB {
		_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s OWNER %s TEMPLATE template0 ENCODING 'UTF8'`, id, id))
		if err != nil && !isCode(err, "42P04") { // duplicate_database
			return fmt.Errorf("create its database: %w", err)
		}
	}
	// The owner's privileges are all it needs; nobody else may connect.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`REVOKE ALL ON DATABASE %s FROM PUBLIC`, id)); err != nil {
		return fmt.Errorf("close its database to others: %w", err)
	}
	s.mu.Lock()
	s.ready[c.Role] = true
	s.mu.Unlock()
	return nil
}

// revokePublic closes the cluster's own databases (the registry's, postgres
// and template1) to every role but their owners and superusers: by
// default any role may connect to any database, and a user's role must
// reach only its own.
func revokePublic(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname !~ '^agent_[0-9a-f]{16}$' AND datallowconn`)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		if _, err := conn.Exec(ctx, `REVOKE CONNECT, TEMPORARY ON DATABASE `+pgx.Identifier{name}.Sanitize()+` FROM PUBLIC`); err != nil {
			return fmt.Errorf("close database %s to other roles: %w", name, err)
		}
	}
	return nil
}

// scramVerifier is password's SCRAM-SHA-256 verifier as Postgres stores it
// (RFC 5802, 7677; Postgres's own encoding), so the password itself never
// appears in a statement.
func scramVerifier(password string) (string, error) {
	const iterations = 4096
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	hmacOf := func(key []byte, msg string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	stored := sha256.Sum256(hmacOf(salted, "Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(hmacOf(salted, "Server Key"))), nil
}

func isCode(err error, code string) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == code
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
