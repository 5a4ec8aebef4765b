//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

type citationReport struct {
	Status    string `json:"status"`
	Citations []struct {
		ID        string `json:"id"`
		Doc       string `json:"doc"`
		Version   int    `json:"version"`
		LineStart int    `json:"line_start"`
		Quote     string `json:"quote"`
		Verified  bool   `json:"verified"`
		Problem   string `json:"problem"`
	} `json:"citations"`
	Reasons []string `json:"reasons"`
}

func citationsOf(t *testing.T, user, tok string, run int64) citationReport {
	t.Helper()
	var rep citationReport
	if err := json.Unmarshal([]byte(mustGet(t, user, tok, fmt.Sprint("/corpus/citations?runId=", run)).Body), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

const petsDoc = "Cats sleep sixteen hours a day.\r\nDogs dream 🐕 too, like people do.\nParrots mimic speech.\n"

func ingestPets(t *testing.T, user, tok string) {
	t.Helper()
	if r := post(t, user, tok, "/ingest?name=pets.txt", petsDoc); r.Code != 201 && r.Code != 200 {
		t.Fatalf("ingest: %d %s", r.Code, r.Body)
	}
}

func TestCitationsVerifiedAcrossRestartAndBrokenByTampering(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "cite")
	ingestPets(t, user, tok)
	run := prompt(t, user, tok, map[string]any{"text": "cite dogs dream", "citations": "required"})
	if run.Status != "done" || !strings.Contains(run.Reply, "[cite:") {
		t.Fatalf("cited prompt: %+v", run)
	}
	rep := citationsOf(t, user, tok, run.RunID)
	if rep.Status != "attribution_verified" || len(rep.Citations) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	c := rep.Citations[0]
	if c.Doc != "pets.txt" || c.Version != 1 || c.LineStart != 2 || c.Quote != "Dogs dream 🐕 too, like people do." {
		t.Fatalf("citation: %+v", c)
	}
	docker(t, "restart", stack+"-"+user+"-agent")
	again := citationsOf(t, user, tok, run.RunID)
	if again.Status != "attribution_verified" || again.Citations[0].LineStart != 2 || again.Citations[0].Quote != c.Quote {
		t.Fatalf("after restart: %+v", again)
	}
	// Alter the stored bytes inside the volume.
	mustInAgentAs(t, user, tok, "agent", "sh", "-c", "printf 'Dogs never dream.\\n' > /data/corpus/pets.txt/v1")
	broken := citationsOf(t, user, tok, run.RunID)
	if broken.Status != "attribution_failed" || broken.Citations[0].Verified || !strings.Contains(broken.Citations[0].Problem, "altered") {
		t.Fatalf("after tampering: %+v", broken)
	}
	if r := request(t, "GET", "/u/"+user+"/corpus/citations?runId=999999", bearer(tok)); r.Code != 404 {
		t.Fatalf("unknown run: %d", r.Code)
	}
	if r := request(t, "GET", "/u/"+user+"/corpus/citations?runId=x", bearer(tok)); r.Code != 400 {
		t.Fatalf("bad run id: %d", r.Code)
	}
}

func TestBadCitedRepliesAreRejectedAndWriteNothing(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "badcite")
	ingestPets(t, user, tok)
	for _, tc := range []struct{ prompt, reason string }{
		{"cite-uncited cats sleep", "has no citation"},
		{"cite-undeclared parrots", "did not return in this run"},
		{"cite-slow parrots mimic", "no longer matches"},
	} {
		t.Run(tc.prompt, func(t *testing.T) {
			var run runResult
			if tc.prompt == "cite-slow parrots mimic" {
				run = citeWithTampering(t, user, tok, tc.prompt)
			} else {
				run = prompt(t, user, tok, map[string]any{"text": tc.prompt, "citations": "required"})
			}
			if run.Status != "unanswered" {
				t.Fatalf("bad reply accepted: %+v", run)
			}
			rep := citationsOf(t, user, tok, run.RunID)
			if rep.Status != "attribution_failed" || len(rep.Citations) != 0 || !strings.Contains(strings.Join(rep.Reasons, " "), tc.reason) {
				t.Fatalf("report: %+v", rep)
			}
			for _, e := range runEntries(inspectOf(t, user, tok), run.RunID) {
				if e.Kind == "citation" {
					t.Fatalf("the rejected run wrote %s %q", e.Kind, e.Text)
				}
				if e.Kind == "assistant_message" && strings.Contains(e.Text, "[cite:") {
					t.Fatalf("a rejected reply was stored: %q", e.Text)
				}
			}
		})
	}
	if r := post(t, user, tok, "/ingest?name=blob.bin", "\x00\x01binary"); r.Code != 415 {
		t.Fatalf("binary ingest: %d", r.Code)
	}
	if r := post(t, user, tok, "/ingest?name=big.txt", strings.Repeat("a", 1<<20+10)); r.Code != 413 {
		t.Fatalf("oversized ingest: %d", r.Code)
	}
}

// citeWithTampering runs the fake model's cite-slow rule: after its search
// the run waits in a shell call until uploads/cite-slow.go exists. The test
// alters the stored document while it waits, then releases it and returns
// the finished run (the same requestId, asked again, waits for it).
func citeWithTampering(t *testing.T, user, tok, text string) runResult {
	t.Helper()
	body := map[string]any{"text": text, "citations": "required", "requestId": "slow-" + user}
	grant(t, user, tok, "shell")
	started := prompt(t, user, tok, map[string]any{"text": text, "citations": "required", "requestId": "slow-" + user, "wait": false})
	waitUntil(t, 60*time.Second, "the run waits in its shell call", func() bool {
		for _, e := range runEntries(inspectOf(t, user, tok), started.RunID) {
			if e.Kind == "tool_call" && e.ToolName == "shell" {
				return true
			}
		}
		return false
	})
	mustInAgentAs(t, user, tok, "agent", "sh", "-c", "printf 'Parrots are silent.\\n' > /data/corpus/pets.txt/v1")
	if r := request(t, "PUT", "/u/"+user+"/uploads/cite-slow.go", bearer(tok)); r.Code != 201 {
		t.Fatalf("release the run: %d %s", r.Code, r.Body)
	}
	return prompt(t, user, tok, body)
}

// The shell cannot write the corpus (it is under /data), so a citation stays
// verified after the model tries to change the document from the shell.
func TestShellCannotTamperWithCitedDocuments(t *testing.T) {
	user, tok := newUser(t, "cite-shell")
	ingestPets(t, user, tok)
	run := prompt(t, user, tok, map[string]any{"text": "cite dogs dream", "citations": "required"})
	grant(t, user, tok, "shell")
	if r := prompt(t, user, tok, map[string]any{"text": `run: printf 'Dogs never dream.\n' > /data/corpus/pets.txt/v1`}).Reply; !strings.Contains(r, "Permission denied") {
		t.Errorf("the shell wrote the corpus: %q", r)
	}
	if rep := citationsOf(t, user, tok, run.RunID); rep.Status != "attribution_verified" {
		t.Errorf("citations after a shell tamper attempt: %+v", rep)
	}
}
