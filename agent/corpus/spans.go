package corpus

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Offsets. A document is split into lines at "\n"; a "\r" right before the
// "\n" belongs to the terminator, not the line. Lines are numbered from 1.
// Byte offsets are UTF-8 byte offsets into the stored document bytes, end
// exclusive, so doc[Start:End] is the quote exactly (an emoji is 4 bytes, a
// combining mark its own 2 bytes). A span is always whole lines.

// Span is a quotable range of one document version.
type Span struct {
	Doc       string `json:"doc"`
	Version   int    `json:"version"`
	LineStart int    `json:"line_start"`
	LineEnd   int    `json:"line_end"`
	Start     int    `json:"start_byte"`
	End       int    `json:"end_byte"`
	Quote     string `json:"quote"`
	QuoteHash string `json:"quote_sha256"`
}

// Line is one line of a document with its byte range.
type Line struct {
	N          int
	Start, End int // bytes of the line's text, terminator excluded
	Text       string
}

// Lines indexes a document's lines.
func Lines(doc []byte) []Line {
	var out []Line
	start := 0
	for n := 1; start <= len(doc); n++ {
		i := strings.IndexByte(string(doc[start:]), '\n')
		end := len(doc)
		next := len(doc) + 1
		if i >= 0 {
			end, next = start+i, start+i+1
		}
		textEnd := end
		if textEnd > start && doc[textEnd-1] == '\r' {
			textEnd--
		}
		if i < 0 && start == len(doc) { // no empty last line after a final newline
			break
		}
		out = append(out, Line{N: n, Start: start, End: textEnd, Text: string(doc[start:textEnd])})
		start = next
	}
	return out
}

// HashQuote is the sha256 of a quote, hex.
func HashQuote(q string) string {
	s := sha256.Sum256([]byte(q))
	return hex.EncodeToString(s[:])
}

// SpanOf builds the span of lines [from, to] of a document version.
func SpanOf(doc string, version int, data []byte, from, to int) (Span, error) {
	lines := Lines(data)
	if from < 1 || to < from || to > len(lines) {
		return Span{}, fmt.Errorf("lines %d-%d are outside the document (%d lines)", from, to, len(lines))
	}
	s := Span{Doc: doc, Version: version, LineStart: from, LineEnd: to, Start: lines[from-1].Start, End: lines[to-1].End}
	s.Quote = string(data[s.Start:s.End])
	s.QuoteHash = HashQuote(s.Quote)
	return s, nil
}

// ErrMismatch is returned when a span's quote no longer matches the stored text.
var ErrMismatch = errors.New("quote no longer matches the stored text")

// Verify re-reads the span's document version now and checks the quote and
// its hash against the stored bytes and the version's recorded sha256.
func (c *Corpus) Verify(s Span) error {
	data, v, err := c.Raw(s.Doc, s.Version)
	if err != nil {
		return fmt.Errorf("%s v%d: %w", s.Doc, s.Version, err)
	}
	if HashBytesHex(data) != v.SHA256 {
		return fmt.Errorf("%w: %s v%d: the stored bytes were altered (sha256 differs from the one recorded at ingest)", ErrMismatch, s.Doc, s.Version)
	}
	if s.Start < 0 || s.End > len(data) || s.Start > s.End || string(data[s.Start:s.End]) != s.Quote {
		return fmt.Errorf("%w: %s v%d bytes %d-%d", ErrMismatch, s.Doc, s.Version, s.Start, s.End)
	}
	if HashQuote(s.Quote) != s.QuoteHash {
		return fmt.Errorf("%w: the recorded quote hash is wrong", ErrMismatch)
	}
	return nil
}

// HashBytesHex is the hex sha256 of b.
func HashBytesHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Search returns up to limit one-line spans of the newest version of every
// document that contain the query's words (case-insensitive), lines with
// all words first.
func (c *Corpus) Search(query string, limit int) ([]Span, error) {
	words := strings.Fields(strings.ToLower(query))
	if len(words) == 0 {
		return nil, errors.New("empty query")
	}
	docs, err := c.Docs()
	if err != nil {
		return nil, err
	}
	type hit struct {
		span  Span
		score int
	}
	var hits []hit
	for _, d := range docs {
		data, v, err := c.Raw(d.Doc, 0)
		if err != nil {
			continue
		}
		for _, l := range Lines(data) {
			low := strings.ToLower(l.Text)
			score := 0
			for _, w := range words {
				if strings.Contains(low, w) {
					score++
				}
			}
			if score == 0 || strings.TrimSpace(l.Text) == "" {
				continue
			}
			s, _ := SpanOf(d.Doc, v.Version, data, l.N, l.N)
			hits = append(hits, hit{s, score})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].score > hits[j].score })
	var out []Span
	for i := 0; i < len(hits) && i < limit; i++ {
		out = append(out, hits[i].span)
	}
	return out, nil
}
