package corpus

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLinesAndOffsets(t *testing.T) {
	doc := []byte("first line\r\n👩‍👩‍👧 family emoji\r\ne\u0301cole with a combining mark\nlast, no newline")
	lines := Lines(doc)
	if len(lines) != 4 {
		t.Fatalf("%d lines", len(lines))
	}
	want := []string{"first line", "👩‍👩‍👧 family emoji", "e\u0301cole with a combining mark", "last, no newline"}
	for i, l := range lines {
		if l.Text != want[i] || string(doc[l.Start:l.End]) != want[i] || l.N != i+1 {
			t.Errorf("line %d: %+v", i+1, l)
		}
	}
	// Byte offsets: the CR of CRLF is not part of line 1; the emoji line starts after "\r\n".
	if lines[0].End != 10 || lines[1].Start != 12 {
		t.Errorf("offsets around CRLF: %+v %+v", lines[0], lines[1])
	}
	// The ZWJ family emoji is 18 bytes; the combining acute is 2 bytes.
	if got := len("👩‍👩‍👧"); got != 18 {
		t.Fatalf("emoji is %d bytes", got)
	}
	s, err := SpanOf("d", 1, doc, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Quote != "👩‍👩‍👧 family emoji\r\ne\u0301cole with a combining mark" || s.Start != 12 || s.End != len("first line\r\n👩‍👩‍👧 family emoji\r\ne\u0301cole with a combining mark") {
		t.Fatalf("span %+v", s)
	}
	if _, err := SpanOf("d", 1, doc, 4, 5); err == nil {
		t.Fatal("span past the end accepted")
	}
	if n := len(Lines([]byte("a\nb\n"))); n != 2 {
		t.Fatalf("final newline makes %d lines, want 2", n)
	}
}

func TestSearchAndVerify(t *testing.T) {
	c := &Corpus{Dir: t.TempDir()}
	if _, _, err := c.Ingest("notes.txt", []byte("Apples are red.\r\nPears are green 🍐.\nBananas are yellow.\n")); err != nil {
		t.Fatal(err)
	}
	spans, err := c.Search("pears GREEN", 5)
	if err != nil || len(spans) == 0 {
		t.Fatalf("search: %v %v", spans, err)
	}
	s := spans[0]
	if s.Doc != "notes.txt" || s.Version != 1 || s.LineStart != 2 || s.Quote != "Pears are green 🍐." {
		t.Fatalf("span %+v", s)
	}
	if err := c.Verify(s); err != nil {
		t.Fatal(err)
	}
	// A new version does not break citations of the old one.
	if _, _, err := c.Ingest("notes.txt", []byte("Pears are brown now.\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(s); err != nil {
		t.Fatalf("old version citation after a new version: %v", err)
	}
	// Bytes altered on disk are reported, not crashed on.
	p := filepath.Join(c.Dir, "notes.txt", "v1")
	os.WriteFile(p, []byte("Apples are red.\r\nPears are GREEN 🍐.\nBananas are yellow.\n"), 0o644)
	if err := c.Verify(s); !errors.Is(err, ErrMismatch) {
		t.Fatalf("altered bytes: %v", err)
	}
	os.Remove(p)
	if err := c.Verify(s); err == nil {
		t.Fatal("missing file verified")
	}
}
