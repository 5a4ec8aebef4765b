// Package citations implements "citations required": the corpus_search tool
// records every span it returns under a citation id the server assigns; the
// gate passes a reply only when every non-blank line cites ids found in
// this run whose quotes still match the stored text; and Check re-verifies
// a run's citations on every read.
package citations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/affido/affido/agent/corpus"
	"github.com/affido/affido/agent/durable"
)

// ToolName is the search tool's name.
const ToolName = "corpus_search"

// Cited is a recorded span with its citation id.
type Cited struct {
	ID string `json:"id"`
	corpus.Span
}

type searchData struct {
	Spans []Cited `json:"spans"`
}

// Tool returns the corpus_search tool (replay-safe: it only reads).
func Tool(c *corpus.Corpus) durable.Tool {
	return durable.Tool{
		Name:        ToolName,
		Description: "Search the owner's documents. Each hit has a citation id like c12; cite it as [cite:c12] at the end of a line. Never write quotes, line numbers or document names yourself.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`),
		Safe:        true,
		ReadOnly:    true,
		Execute: func(ctx context.Context, call durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
			var a struct{ Query string }
			if err := json.Unmarshal(args, &a); err != nil {
				return durable.ToolResult{}, fmt.Errorf("invalid arguments: %w", err)
			}
			spans, err := c.Search(a.Query, 8)
			if err != nil {
				return durable.ToolResult{}, err
			}
			if len(spans) == 0 {
				return durable.ToolResult{Output: "no matches"}, nil
			}
			var data searchData
			var b strings.Builder
			for _, s := range spans {
				id, err := call.Store.MintID()
				if err != nil {
					return durable.ToolResult{}, err
				}
				cid := fmt.Sprintf("c%d", id)
				data.Spans = append(data.Spans, Cited{ID: cid, Span: s})
				fmt.Fprintf(&b, "[%s] %s v%d line %d: %s\n", cid, s.Doc, s.Version, s.LineStart, s.Quote)
			}
			raw, _ := json.Marshal(data)
			return durable.ToolResult{Output: b.String(), Data: raw}, nil
		},
	}
}

// Required reports whether a run must cite: the prompt's option wins over
// the conversation's setting.
func Required(options, settings map[string]string) bool {
	if v := options["citations"]; v != "" {
		return v == "required"
	}
	return settings["citations"] == "required"
}

var marker = regexp.MustCompile(`\[cite:([A-Za-z0-9_-]{1,40})\]`)

// ReplyLine is one non-blank line of a reply and the ids it cites.
type ReplyLine struct {
	N    int
	Text string
	IDs  []string
}

// ParseReply splits a reply into its non-blank lines and their citation ids.
func ParseReply(reply string) []ReplyLine {
	var out []ReplyLine
	for i, line := range strings.Split(reply, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		rl := ReplyLine{N: i + 1, Text: line}
		for _, m := range marker.FindAllStringSubmatch(line, -1) {
			rl.IDs = append(rl.IDs, m[1])
		}
		out = append(out, rl)
	}
	return out
}

// recorded returns the spans corpus_search returned in a run, by id.
func recorded(ctx context.Context, st *durable.Store, conv, run int64) (map[string]Cited, error) {
	entries, err := st.RunEntries(ctx, conv, run)
	if err != nil {
		return nil, err
	}
	out := map[string]Cited{}
	for _, e := range entries {
		if e.Kind != durable.ToolResultEntry || e.ToolName != ToolName || len(e.Data) == 0 {
			continue
		}
		var d searchData
		if json.Unmarshal(e.Data, &d) == nil {
			for _, s := range d.Spans {
				out[s.ID] = s
			}
		}
	}
	return out, nil
}

// Gate returns the harness gate for corpus c.
func Gate(c *corpus.Corpus) func(ctx context.Context, g durable.GateInput) (string, []durable.Entry, error) {
	return func(ctx context.Context, g durable.GateInput) (string, []durable.Entry, error) {
		if !Required(g.Options, g.Settings) {
			return "", nil, nil
		}
		spans, err := recorded(ctx, g.Store, g.ConversationID, g.RunID)
		if err != nil {
			return "", nil, err
		}
		lines := ParseReply(g.Reply.Text)
		if len(lines) == 0 {
			return "the reply is empty; answer with cited lines.", nil, nil
		}
		var problems []string
		var cited []string
		seen := map[string]bool{}
		for _, l := range lines {
			if len(l.IDs) == 0 {
				problems = append(problems, fmt.Sprintf("line %d has no citation", l.N))
				continue
			}
			for _, id := range l.IDs {
				s, ok := spans[id]
				if !ok {
					problems = append(problems, fmt.Sprintf("line %d cites %s, which corpus_search did not return in this run", l.N, id))
					continue
				}
				if err := c.Verify(s.Span); err != nil {
					problems = append(problems, fmt.Sprintf("line %d cites %s: %v", l.N, id, err))
					continue
				}
				if !seen[id] {
					seen[id] = true
					cited = append(cited, id)
				}
			}
		}
		if len(problems) > 0 {
			return strings.Join(problems, "; ") + ".", nil, nil
		}
		var extra []durable.Entry
		for _, id := range cited {
			eid, err := g.Mint()
			if err != nil {
				return "", nil, err
			}
			data, _ := json.Marshal(citationRecord{Cited: spans[id], AssistantEntryID: g.EntryID})
			extra = append(extra, durable.Entry{ID: eid, ConversationID: g.ConversationID, Kind: durable.CitationEntry,
				RunID: g.RunID, Text: spans[id].Quote, Data: data})
		}
		return "", extra, nil
	}
}

type citationRecord struct {
	Cited
	AssistantEntryID int64 `json:"assistant_entry_id"`
}

// Checked is one citation as re-verified now.
type Checked struct {
	Cited
	Verified bool   `json:"verified"`
	Problem  string `json:"problem,omitempty"`
}

// Report is the answer to GET /corpus/citations.
type Report struct {
	RunID     int64     `json:"run_id"`
	Status    string    `json:"status"` // attribution_verified, attribution_failed, no_citations, running
	Citations []Checked `json:"citations"`
	Reasons   []string  `json:"reasons,omitempty"`
}

// ErrUnknownRun is returned for a run id that is not a run.
var ErrUnknownRun = errors.New("unknown run")

// Check re-verifies every citation of a run against the stored text now.
func Check(ctx context.Context, st *durable.Store, c *corpus.Corpus, run int64) (Report, error) {
	task, err := st.Task(ctx, run)
	if errors.Is(err, durable.ErrNotFound) || (err == nil && task.Kind != durable.KindGeneration) {
		return Report{}, ErrUnknownRun
	}
	if err != nil {
		return Report{}, err
	}
	rep := Report{RunID: run, Citations: []Checked{}}
	entries, err := st.RunEntries(ctx, task.ConversationID, run)
	if err != nil {
		return Report{}, err
	}
	for _, e := range entries {
		if e.Kind != durable.CitationEntry {
			continue
		}
		var rec citationRecord
		if err := json.Unmarshal(e.Data, &rec); err != nil {
			rep.Citations = append(rep.Citations, Checked{Problem: "unreadable citation record"})
			continue
		}
		ch := Checked{Cited: rec.Cited, Verified: true}
		if err := c.Verify(rec.Span); err != nil {
			ch.Verified, ch.Problem = false, err.Error()
			rep.Reasons = append(rep.Reasons, fmt.Sprintf("%s (%s v%d line %d): %v", rec.ID, rec.Doc, rec.Version, rec.LineStart, err))
		}
		rep.Citations = append(rep.Citations, ch)
	}
	switch {
	case task.State != durable.Terminal:
		rep.Status = "running"
	case strings.HasPrefix(task.Error, "attribution_failed"):
		rep.Status = "attribution_failed"
		rep.Reasons = append(rep.Reasons, strings.TrimPrefix(task.Error, "attribution_failed: "))
	case len(rep.Citations) == 0:
		rep.Status = "no_citations"
	case len(rep.Reasons) > 0:
		rep.Status = "attribution_failed"
	default:
		rep.Status = "attribution_verified"
	}
	return rep, nil
}
