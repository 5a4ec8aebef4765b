package postgres

import (
	"regexp"
	"strconv"
	"strings"
)

// translate turns the store's SQLite spelling into Postgres's: ? becomes
// $1, $2, … outside quotes, and INSERT OR IGNORE becomes ON CONFLICT DO
// NOTHING. The rest of the store's SQL (ON CONFLICT … DO UPDATE, partial
// indexes, LIMIT, excluded.) is the same in both.
func translate(q string) string {
	var b strings.Builder
	last := 0
	for n, at := range unquoted(q, '?') {
		b.WriteString(q[last:at])
		b.WriteString("$" + strconv.Itoa(n+1))
		last = at + 1
	}
	b.WriteString(q[last:])
	out := b.String()
	if insertOrIgnore.MatchString(out) {
		out = insertOrIgnore.ReplaceAllString(out, "${1}INSERT INTO") + " ON CONFLICT DO NOTHING"
	}
	return out
}

var insertOrIgnore = regexp.MustCompile(`(?i)^(\s*)INSERT\s+OR\s+IGNORE\s+INTO`)

// split cuts q into statements at semicolons outside quotes, dropping
// empty ones.
func split(q string) []string {
	var out []string
	start := 0
	for _, end := range append(unquoted(q, ';'), len(q)) {
		if s := strings.TrimSpace(q[start:end]); s != "" {
			out = append(out, s)
		}
		start = end + 1
	}
	return out
}

// unquoted returns the byte offsets of c in q outside '…' and "…".
func unquoted(q string, c rune) []int {
	var at []int
	var quote rune
	for i, r := range q {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == c:
			at = append(at, i)
		}
	}
	return at
}

// isDDL reports whether statement q would change the schema or the
// database's objects, by its first word.
func isDDL(q string) bool {
	f := strings.Fields(q)
	if len(f) == 0 {
		return false
	}
	switch strings.ToUpper(f[0]) {
	case "CREATE", "ALTER", "DROP", "TRUNCATE", "GRANT", "REVOKE", "COMMENT", "REINDEX", "CLUSTER", "VACUUM",
		"SECURITY", "DO", "COPY", "LOCK", "SET", "RESET", "IMPORT", "REFRESH", "CALL":
		return true
	}
	return false
}

// Postgres text cannot hold NUL, which SQLite's can (a requestId may carry
// one). A string argument with a NUL or with the escape character U+E000
// (private use) is stored escaped: U+E000 as U+E000 U+E001, NUL as U+E000
// U+E002. The mapping is one to one, so equality (unique keys, lookups)
// works on the stored form, and every string read back is unescaped. A
// string with neither, which is every other, is stored as it is.
var (
	escapeNUL   = strings.NewReplacer("\ue000", "\ue000\ue001", "\x00", "\ue000\ue002")
	unescapeNUL = strings.NewReplacer("\ue000\ue001", "\ue000", "\ue000\ue002", "\x00")
)

// escape escapes the string arguments that need it.
func escape(in []any) []any {
	var out []any
	for i, a := range in {
		s, ok := a.(string)
		if !ok || !strings.ContainsAny(s, "\x00\ue000") {
			continue
		}
		if out == nil {
			out = append([]any(nil), in...)
		}
		out[i] = escapeNUL.Replace(s)
	}
	if out == nil {
		return in
	}
	return out
}
