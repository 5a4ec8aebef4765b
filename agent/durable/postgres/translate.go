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
	n := 0
	var quote rune
	for _, c := range q {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
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
	var quote rune
	start := 0
	for i, c := range q {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == ';':
			if s := strings.TrimSpace(q[start:i]); s != "" {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	if s := strings.TrimSpace(q[start:]); s != "" {
		out = append(out, s)
	}
	return out
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
