package durable

import "strings"

// The few statements whose SQL differs between SQLite and Postgres, by
// name. Everything else the store runs is one text for both (the Postgres
// facade only turns ? into $n). Keep this list short: a statement belongs
// here only when no neutral spelling exists.
type dialectSQL struct{ sqlite, postgres string }

func (d dialectSQL) in(db DB) string {
	if db.Dialect() == Postgres {
		return d.postgres
	}
	return d.sqlite
}

var (
	// setTitle: JSON editing (SQLite's json_set, Postgres's jsonb_set).
	setTitle = dialectSQL{
		`UPDATE conversations SET record = json_set(record, '$.title', ?) WHERE id = ?`,
		`UPDATE conversations SET record = jsonb_set(record::jsonb, '{title}', to_jsonb(?::text))::text WHERE id = ?`,
	}
	setArchived = dialectSQL{
		`UPDATE conversations SET record = json_set(record, '$.archived', json('true')) WHERE id = ?`,
		`UPDATE conversations SET record = jsonb_set(record::jsonb, '{archived}', 'true')::text WHERE id = ?`,
	}
	clearArchived = dialectSQL{
		`UPDATE conversations SET record = json_remove(record, '$.archived') WHERE id = ?`,
		`UPDATE conversations SET record = (record::jsonb - 'archived')::text WHERE id = ?`,
	}
	// searchEntries takes the query (searchQuery's) and a limit. SQLite
	// reads its FTS5 table; Postgres a GIN index on the same expression
	// (migration 0005), 'simple' configuration: no stemming, and unlike
	// FTS5's remove_diacritics, "café" does not find "cafe".
	searchEntries = dialectSQL{
		`SELECT e.record FROM entries_fts f JOIN entries e ON e.id = f.rowid
		WHERE entries_fts MATCH ? ORDER BY e.id DESC LIMIT ?`,
		`SELECT record FROM entries
		WHERE kind IN ('owner_message', 'assistant_message')
		AND to_tsvector('simple', replace(record, '\u0000', '')::json ->> 'text') @@ to_tsquery('simple', ?)
		ORDER BY id DESC LIMIT ?`,
	}
	// forgetSearch drops a conversation's entries from the search index
	// before they are deleted: a contentless FTS5 table deletes a row given
	// the text it indexed. Postgres's index follows the rows: nothing to do.
	forgetSearch = dialectSQL{
		`INSERT INTO entries_fts (entries_fts, rowid, text)
			SELECT 'delete', id, json_extract(record, '$.text') FROM entries
			WHERE conversation_id = ? AND kind IN ('owner_message', 'assistant_message') AND coalesce(json_extract(record, '$.text'), '') <> ''`,
		``,
	}
	// clearSearch empties the search index before Copy replaces entries
	// (a contentless FTS5 table's 'delete-all'); the trigger on entries
	// fills it again from the copied rows.
	clearSearch = dialectSQL{`INSERT INTO entries_fts (entries_fts) VALUES ('delete-all')`, ``}
)

// searchQuery is the full-text query for words, the last one a prefix.
// Words are letters and digits only (searchWords), so nothing in them is
// read as query syntax.
func searchQuery(db DB, words []string) string {
	terms := make([]string, len(words))
	if db.Dialect() == Postgres {
		copy(terms, words)
		terms[len(terms)-1] += ":*"
		return strings.Join(terms, " & ")
	}
	for i, w := range words {
		terms[i] = `"` + w + `"`
	}
	terms[len(terms)-1] += "*"
	return strings.Join(terms, " ")
}
