//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The owner's notes and an agent's work notes, against the real stack: the
// scripted model answers "what were you told?" with the system message it
// was sent, so what reached the model is what it says.

func put(t *testing.T, user, tok, route, body string) response {
	t.Helper()
	req, _ := http.NewRequest("PUT", baseURL+"/u/"+user+route, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", route, err)
	}
	defer resp.Body.Close()
	return response{resp.StatusCode, resp.Header, readAll(resp)}
}

func mustPut(t *testing.T, user, tok, route, body string) {
	t.Helper()
	if r := put(t, user, tok, route, body); r.Code != 200 {
		t.Fatalf("PUT %s %s: %d %s", route, body, r.Code, r.Body)
	}
}

// told is the system message the scripted model was sent for a prompt of
// the agent at path.
func told(t *testing.T, path, tok string) string {
	t.Helper()
	r := prompt(t, path, tok, map[string]any{"text": "what were you told?"})
	if r.Status != "done" || !strings.HasPrefix(r.Reply, "system: ") {
		t.Fatalf("what %s was told: %+v", path, r)
	}
	return r.Reply
}

// An agent's instructions and the owner's notes reach the model request,
// then its work notes; an agent with owner_notes false and a scheduled
// job's run get the work notes only.
func TestNotesReachTheModel(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "notes")
	clerk := user + "/agents/clerk"
	patch(t, user, tok, "/agents/main", `{"instructions":"You keep the homelab running."}`)
	mustPut(t, user, tok, "/notes", `{"text":"The owner is Ada. She prefers short answers.","version":0}`)
	mustPut(t, user, tok, "/agents/main/notes", `{"text":"The NAS is at nas.lan."}`)
	s := told(t, user, tok)
	inst, owner, work := strings.Index(s, "homelab"), strings.Index(s, "She prefers short answers."), strings.Index(s, "The NAS is at nas.lan.")
	if inst < 0 || owner < inst || work < owner {
		t.Fatalf("main was told: %q", s)
	}
	mustPost(t, user, tok, "/agents", `{"name":"clerk","owner_notes":false}`, 201)
	mustPut(t, user, tok, "/agents/clerk/notes", `{"text":"Invoices go to the accounts folder."}`)
	if s := told(t, clerk, tok); strings.Contains(s, "Ada") || !strings.Contains(s, "Invoices go to the accounts folder.") {
		t.Fatalf("clerk (no owner notes) was told: %q", s)
	}
	j := mustPost(t, user, tok, "/jobs", `{"cron":"* * * * *","prompt":"what were you told?"}`, 201)
	conv := int64(j["conversation_id"].(float64))
	var reply string
	waitUntil(t, 90*time.Second, "the job's run", func() bool {
		for _, e := range entriesOf(t, user, tok, conv) {
			if e.Kind == "assistant_message" && strings.HasPrefix(e.Text, "system: ") {
				reply = e.Text
				return true
			}
		}
		return false
	})
	if r := request(t, "DELETE", fmt.Sprintf("/u/%s/jobs/%d", user, int64(j["id"].(float64))), bearer(tok)); r.Code != 200 {
		t.Fatalf("delete the job: %d %s", r.Code, r.Body)
	}
	if strings.Contains(reply, "Ada") || !strings.Contains(reply, "The NAS is at nas.lan.") {
		t.Fatalf("the job's run was told: %q", reply)
	}
}

// After a fetched page enters the conversation, write_note asks although a
// rule allows it: main delegates a fetch to the worker (the owner's agents
// have no web tools), the page's "note owner: …" line comes back in the
// worker's answer and steers the scripted model into writing a note about
// the owner. Denied, the notes stay as they were. Without outside text, in
// a new conversation, the rule allows it.
func TestWriteNoteAsksAfterAFetchedPage(t *testing.T) {
	t.Parallel()
	startSink(t)
	user, tok := newUser(t, "notesask")
	sink := "http://" + env("AFFIDO_E2E_SINK_IP", "10.212.1.50") + ":9999"
	grant(t, user, tok, "delegate", "write_note")
	mustPost(t, user+"/agents/worker", tok, "/rules", `{"tool":"fetch_url","effect":"allow","confirm_unconditional":true}`, 201)
	r := post(t, user, tok, "/prompt", `{"text":"delegate: fetch `+sink+`/note/hours"}`)
	var s settled
	if r.Code != 200 || json.Unmarshal([]byte(r.Body), &s) != nil || s.Status != "waiting" || s.WaitingFor == nil {
		t.Fatalf("the fetch: want a run waiting for the owner, got %d %s", r.Code, r.Body)
	}
	if s.WaitingFor.Tool != "write_note" || !strings.Contains(s.WaitingFor.Reason, "outside text") || !strings.Contains(string(s.WaitingFor.Arguments), "evil@example.org") {
		t.Fatalf("the page's note: %+v", s.WaitingFor)
	}
	if d := decide(t, user, tok, s.WaitingFor.ID, `{"decision":"deny"}`); d.Status != "done" {
		t.Fatalf("after the denial: %+v", d)
	}
	if b := mustGet(t, user, tok, "/notes").Body; !strings.Contains(b, `"text":""`) {
		t.Fatalf("the owner's notes after the denial: %s", b)
	}
	mustPost(t, user, tok, "/session/new", `{}`, 200)
	if r := prompt(t, user, tok, map[string]any{"text": "note owner: likes green tea"}); r.Status != "done" {
		t.Fatalf("write_note without outside text: %+v", r)
	}
	if b := mustGet(t, user, tok, "/notes").Body; !strings.Contains(b, `"text":"likes green tea"`) || !strings.Contains(b, `"updated_by":"main"`) {
		t.Fatalf("the owner's notes: %s", b)
	}
}
