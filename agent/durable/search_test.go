package durable_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
)

// Search finds what the owner and the model wrote across conversations,
// every word, the last as a prefix, newest first; what the owner types is
// never FTS5 syntax. Tried: a word in two conversations, a prefix, two
// words, accents folded, quotes and operators, nothing, no match.
func TestSearchAcrossConversations(t *testing.T) {
	e := newEnv(t, durable.Options{})
	second, err := e.store.MintID()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.h.Commit(ctx, durable.Writes{Conversations: []durable.Conversation{{ID: second, CreatedAt: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	e.ask(1, durable.Input{Text: "is the homelab OK?"})
	e.ask(second, durable.Input{Text: "water the plants, then check the homelab backups"})
	e.ask(second, durable.Input{Text: "Café crème at nine"})
	find := func(q string) []durable.Hit {
		t.Helper()
		hits, err := e.store.Search(ctx, q, 20)
		if err != nil {
			t.Fatalf("search %q: %v", q, err)
		}
		return hits
	}
	hits := find("homelab")
	// The owner's two messages and the model's two echoes, newest first.
	if len(hits) != 4 || hits[0].Entry.ConversationID != second || hits[3].Entry.ConversationID != 1 || hits[0].Entry.ID < hits[1].Entry.ID {
		t.Fatalf("homelab: %+v", hits)
	}
	if !strings.Contains(hits[0].Snippet, "homelab") {
		t.Fatalf("snippet %q", hits[0].Snippet)
	}
	if n := len(find("homel")); n != 4 {
		t.Fatalf("a prefix finds %d", n)
	}
	if n := len(find("homelab backups")); n != 2 {
		t.Fatalf("two words find %d", n)
	}
	if n := len(find("cafe CREME")); n != 2 {
		t.Fatalf("accents and case folded: %d", n)
	}
	for _, q := range []string{`"`, `homelab" OR "x`, `NEAR(homelab plants)`, `*`, `-homelab`, `homelab:`, `'); DROP TABLE entries; --`} {
		if _, err := e.store.Search(ctx, q, 20); err != nil {
			t.Errorf("%q: %v", q, err)
		}
	}
	if n := len(find("")); n != 0 {
		t.Fatalf("nothing finds %d", n)
	}
	if n := len(find("zebra")); n != 0 {
		t.Fatalf("no match finds %d", n)
	}
	if got := len(find("homelab")); got != 4 {
		t.Fatalf("after odd queries: %d", got)
	}
}

// A store written before search (version 4) is searchable after the
// migration: the entries already there are indexed once, the owner's
// messages and replies only.
func TestSearchIndexesEntriesWrittenBeforeIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v4.db")
	db := openDB(t, path)
	if err := durable.MigrateTo(ctx, db, 4); err != nil {
		t.Fatal(err)
	}
	for i, row := range []struct{ kind, text string }{{"owner_message", "check the homelab"}, {"assistant_message", "the homelab is fine"}, {"tool_result", "homelab logs"}} {
		rec := fmt.Sprintf(`{"id":%d,"conversation_id":1,"kind":%q,"text":%q,"at":"2026-11-01T00:00:00Z"}`, 10+i, row.kind, row.text)
		if err := db.Run(ctx, `INSERT INTO entries (id, conversation_id, kind, commit_seq, record) VALUES (?, 1, ?, ?, ?)`, 10+i, row.kind, i+1, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Run(ctx, `INSERT INTO conversations (id, record) VALUES (1, '{"id":1,"created_at":"2026-11-01T00:00:00Z"}')`); err != nil {
		t.Fatal(err)
	}
	st, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	hits, err := st.Search(ctx, "homelab", 10)
	if err != nil || len(hits) != 2 || hits[0].Entry.ID != 11 || hits[1].Entry.ID != 10 {
		t.Fatalf("after the migration: %+v %v", hits, err)
	}
}
