package durable

import (
	"context"
	"encoding/json"
	"strings"
	"unicode"
)

// Hit is one entry a search found: what the owner or the model wrote,
// with a snippet around the first word searched for.
type Hit struct {
	Entry   Entry  `json:"entry"`
	Snippet string `json:"snippet"`
}

// MaxSearchWords bounds the words of one search.
const MaxSearchWords = 8

// searchWords are the words of q a search looks for: letters and digits
// only, so nothing in q is read as FTS5 syntax; at most MaxSearchWords.
func searchWords(q string) []string {
	words := strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) })
	if len(words) > MaxSearchWords {
		words = words[:MaxSearchWords]
	}
	return words
}

// Search finds the owner's messages and the model's replies, in every
// conversation, that contain every word of q (the last one as a prefix,
// so a search can follow typing), newest first, at most limit.
func (s *Store) Search(ctx context.Context, q string, limit int) ([]Hit, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	words := searchWords(q)
	if len(words) == 0 {
		return []Hit{}, nil
	}
	rows, err := s.db.All(ctx, searchEntries.in(s.db), searchQuery(s.db, words), limit)
	if err != nil {
		return nil, err
	}
	out := make([]Hit, 0, len(rows))
	for _, row := range rows {
		var e Entry
		if err := json.Unmarshal([]byte(row["record"].(string)), &e); err != nil {
			return nil, err
		}
		out = append(out, Hit{Entry: e, Snippet: snippet(e.Text, words[0], 120)})
	}
	return out, nil
}

// snippet is up to n characters of text around the first place word
// occurs (case folded), marked with … where it was cut.
func snippet(text, word string, n int) string {
	runes := []rune(text)
	lower := []rune(strings.ToLower(text))
	if len(lower) != len(runes) { // a letter whose lower case is longer: cut the folded text
		runes = lower
	}
	at := strings.Index(string(lower), word)
	start := 0
	if at > 0 {
		start = len([]rune(string(lower)[:at])) - n/3
	}
	start = max(start, 0)
	end := min(start+n, len(runes))
	out := strings.Join(strings.Fields(string(runes[start:end])), " ")
	if start > 0 {
		out = "…" + out
	}
	if end < len(runes) {
		out += "…"
	}
	return out
}
