package postgres

import (
	"reflect"
	"testing"
)

func TestTranslate(t *testing.T) {
	cases := []struct{ in, want string }{
		{`SELECT v FROM t WHERE k = ? AND j = ?`, `SELECT v FROM t WHERE k = $1 AND j = $2`},
		{`SELECT '?' AS q, "a?" FROM t WHERE k = ?`, `SELECT '?' AS q, "a?" FROM t WHERE k = $1`},
		{`SELECT 'it''s ?' FROM t WHERE k = ?`, `SELECT 'it''s ?' FROM t WHERE k = $1`},
		{`  insert or ignore into t (k) VALUES (?)`, `  INSERT INTO t (k) VALUES ($1) ON CONFLICT DO NOTHING`},
		{`SELECT 1`, `SELECT 1`},
	}
	for _, c := range cases {
		if got := translate(c.in); got != c.want {
			t.Errorf("translate(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSplit(t *testing.T) {
	got := split(`INSERT INTO t VALUES ('a;b'); ; SELECT 1;SELECT ";"  `)
	want := []string{`INSERT INTO t VALUES ('a;b')`, `SELECT 1`, `SELECT ";"`}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("split = %q, want %q", got, want)
	}
}

func TestEscapeNULRoundTrips(t *testing.T) {
	for _, s := range []string{"plain", "nul\x00here", "\ue000", "\ue000\ue002", "\x00\ue000\x00"} {
		stored := escape([]any{s})[0].(string)
		back, _ := value(stored)
		if back != s {
			t.Errorf("%q stored as %q came back as %q", s, stored, back)
		}
	}
}
