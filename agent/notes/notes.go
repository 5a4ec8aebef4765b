// Package notes keeps what the owner's agents remember across
// conversations: one set of notes about the owner, shared by every agent
// allowed them, and each agent's work notes. Notes live in the agents'
// durable stores, outside every conversation: a reset, a summary or a
// deleted conversation leaves them as they were. The owner edits both;
// the model reads them in its system prompt and with read_notes, and
// writes them with write_note, which runs in the agent process against
// the store (the tools' uid never sees them) and asks the owner whenever
// outside text has entered the conversation since the owner's last message.
package notes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/affido/affido/agent/durable"
)

// The two sets of notes, by the name they are stored under.
const (
	Owner = "owner" // about the owner, shared by the agents allowed them
	Work  = "work"  // one agent's notes on its own work
)

// MaxBytes bounds one set of notes.
const MaxBytes = 16 << 10

// ByOwner is who the owner's own edits are recorded as.
const ByOwner = "owner"

// Errors callers branch on.
var (
	// ErrInvalid is wrapped by every error for notes that cannot be kept.
	ErrInvalid = errors.New("invalid notes")
	// ErrNotShared is returned for the owner's notes to an agent or a run
	// that gets none (an agent with owner_notes false, a job's run).
	ErrNotShared = errors.New("no owner notes here")
)

// Check refuses text that cannot be a set of notes.
func Check(text string) error {
	if len(text) > MaxBytes || !utf8.ValidString(text) {
		return fmt.Errorf("%w: a set of notes is at most %d bytes of valid UTF-8 (this is %d bytes)", ErrInvalid, MaxBytes, len(text))
	}
	return nil
}

// Write replaces the notes called name in h's store with text, if they
// are still at version (any version when version is negative), and
// records the write in the trace of the store's root conversation, in
// one commit: durable.ErrNoteChanged when someone wrote them meanwhile.
// by is ByOwner or the name of the agent that wrote them.
func Write(ctx context.Context, h *durable.Harness, name, text, by string, version int64) (durable.Note, error) {
	if err := Check(text); err != nil {
		return durable.Note{}, err
	}
	if version < 0 {
		cur, err := h.Store().Note(ctx, name)
		if err != nil {
			return durable.Note{}, err
		}
		version = cur.Version
	}
	n := durable.Note{Name: name, Text: text, Version: version + 1, UpdatedAt: h.Now(), UpdatedBy: by}
	id, err := h.Store().MintID()
	if err != nil {
		return durable.Note{}, err
	}
	data, _ := json.Marshal(map[string]any{"notes": name, "by": by, "version": n.Version, "bytes": len(text), "text": text})
	entry := durable.Entry{ID: id, ConversationID: durable.RootConversation, Kind: durable.NoteEntry, At: n.UpdatedAt, Data: data,
		Text: fmt.Sprintf("%s notes written by %s (version %d, %d bytes)", name, by, n.Version, len(text))}
	if err := h.Commit(ctx, durable.Writes{Notes: []durable.Note{n}, Entries: []durable.Entry{entry}}); err != nil {
		return durable.Note{}, err
	}
	return n, nil
}

// Keeper finds one agent's notes for one of its runs.
type Keeper interface {
	// Keep returns the harness whose store keeps the notes called name
	// (Owner or Work) for a run answering in: ErrNotShared for the owner's
	// notes when the agent or the run gets none.
	Keep(ctx context.Context, name string, in durable.Input) (*durable.Harness, error)
}

// read returns the notes called name a run answering in sees; ok is false
// when it gets none.
func read(ctx context.Context, k Keeper, name string, in durable.Input) (n durable.Note, ok bool, err error) {
	h, err := k.Keep(ctx, name, in)
	if errors.Is(err, ErrNotShared) {
		return durable.Note{Name: name}, false, nil
	}
	if err != nil {
		return durable.Note{}, false, err
	}
	n, err = h.Store().Note(ctx, name)
	return n, err == nil, err
}

// Prompt is what the notes add to the system prompt of a run answering in:
// the owner's notes (when it gets them), then the agent's work notes;
// nothing for notes that are empty. No time is in it, so a provider's
// prompt cache holds until the notes change.
func Prompt(ctx context.Context, k Keeper, in durable.Input) (string, error) {
	var b strings.Builder
	for _, set := range []struct{ name, title string }{
		{Owner, "Notes about your owner (kept with read_notes and write_note, shared with their other agents):"},
		{Work, "Your work notes (kept with read_notes and write_note):"},
	} {
		n, _, err := read(ctx, k, set.name, in)
		if err != nil {
			return "", fmt.Errorf("read the %s notes: %w", set.name, err)
		}
		if text := strings.TrimSpace(n.Text); text != "" {
			fmt.Fprintf(&b, "%s\n%s\n\n", set.title, text)
		}
	}
	return strings.TrimSpace(b.String()), nil
}

// Tools returns read_notes and write_note of the agent called self.
func Tools(self string, k Keeper) []durable.Tool {
	return []durable.Tool{
		{
			Name:        "read_notes",
			Description: "Read your notes: the notes about your owner (shared with their other agents) and your own work notes, with their versions.",
			Parameters:  durable.Schema(""),
			Safe:        true,
			ReadOnly:    true,
			Execute: func(ctx context.Context, c durable.ToolCallContext, _ json.RawMessage) (durable.ToolResult, error) {
				in, err := durable.RunInput(ctx, c.Store, c.RunID)
				if err != nil {
					return durable.ToolResult{}, err
				}
				var b strings.Builder
				for _, name := range []string{Owner, Work} {
					n, ok, err := read(ctx, k, name, in)
					switch {
					case err != nil:
						return durable.ToolResult{}, err
					case !ok:
						fmt.Fprintf(&b, "%s notes: none for this run (this agent or this run is not given the owner's notes)\n\n", name)
					case n.Text == "":
						fmt.Fprintf(&b, "%s notes (version %d): empty\n\n", name, n.Version)
					default:
						fmt.Fprintf(&b, "%s notes (version %d, %d of %d bytes):\n%s\n\n", name, n.Version, len(n.Text), MaxBytes, n.Text)
					}
				}
				return durable.ToolResult{Output: strings.TrimSpace(b.String())}, nil
			},
		},
		{
			Name: "write_note",
			Description: `Write to your notes, which outlast every conversation: "owner" for what you learn about your owner (shared with their other agents), ` +
				`"work" for your own work. mode "append" (the default) adds text as a new line; "replace" sets the whole set to text (read_notes first). ` +
				"It asks your owner when text from elsewhere is in the conversation.",
			Parameters: durable.Schema(`"notes":{"type":"string","enum":["owner","work"]},"text":{"type":"string"},"mode":{"type":"string","enum":["append","replace"]}`, "notes", "text"),
			// Appending twice is not writing once: an interrupted call is
			// reported to the model, which can read_notes to see.
			Safe:             false,
			AsksAfterOutside: true,
			Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				var a struct{ Notes, Text, Mode string }
				if err := json.Unmarshal(args, &a); err != nil {
					return durable.ToolResult{}, fmt.Errorf("invalid arguments: %w", err)
				}
				if a.Notes != Owner && a.Notes != Work {
					return durable.ToolResult{}, fmt.Errorf(`notes is "owner" or "work", not %q`, a.Notes)
				}
				if a.Mode != "" && a.Mode != "append" && a.Mode != "replace" {
					return durable.ToolResult{}, fmt.Errorf(`mode is "append" or "replace", not %q`, a.Mode)
				}
				in, err := durable.RunInput(ctx, c.Store, c.RunID)
				if err != nil {
					return durable.ToolResult{}, err
				}
				h, err := k.Keep(ctx, a.Notes, in)
				if errors.Is(err, ErrNotShared) {
					return durable.ToolResult{}, errors.New("this agent or this run is not given the owner's notes, so it cannot write them")
				} else if err != nil {
					return durable.ToolResult{}, err
				}
				cur, err := h.Store().Note(ctx, a.Notes)
				if err != nil {
					return durable.ToolResult{}, err
				}
				text := a.Text
				if a.Mode != "replace" && strings.TrimSpace(cur.Text) != "" {
					text = strings.TrimRight(cur.Text, "\n") + "\n" + a.Text
				}
				if len(text) > MaxBytes {
					return durable.ToolResult{}, fmt.Errorf("the %s notes would be %d bytes, over the %d allowed: replace them with a shorter text", a.Notes, len(text), MaxBytes)
				}
				n, err := Write(ctx, h, a.Notes, text, self, cur.Version)
				if errors.Is(err, durable.ErrNoteChanged) {
					return durable.ToolResult{}, fmt.Errorf("the %s notes changed while you wrote; read_notes and write again", a.Notes)
				} else if err != nil {
					return durable.ToolResult{}, err
				}
				return durable.ToolResult{Output: fmt.Sprintf("%s notes written (version %d, %d of %d bytes).", a.Notes, n.Version, len(n.Text), MaxBytes)}, nil
			},
		},
	}
}
