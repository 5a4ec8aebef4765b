package server_test

// The claim is the one way a sandbox learns whom it belongs to. These tests
// attack it: a claim without the control header (a user's request through
// the user route, which strips it), a claim for another user, a claim from
// inside the sandbox, malformed claims, and requests to an unclaimed agent.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/affido/affido/agent/identity"
	"github.com/affido/affido/agent/server"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

var control = http.Header{sandboxapi.HeaderControl: {"1"}}

func (a *agent) identityFile() string { return filepath.Join(filepath.Dir(a.db), identity.FileName) }

// wantHealth checks GET /health.
func (a *agent) wantHealth(claimed bool, user string) {
	a.t.Helper()
	code, m := a.do("GET", "/health", "")
	if code != 200 || m["status"] != "ok" || m["claimed"] != claimed || m["user"] != user {
		a.t.Fatalf("health %d %v, want claimed=%v user=%q", code, m, claimed, user)
	}
}

func TestClaimNeedsTheControlHeader(t *testing.T) {
	a := startAgent(t, t.TempDir(), "")
	for _, v := range [][]string{nil, {"0"}, {"yes"}, {"11"}, {""}} {
		hdr := http.Header{}
		if v != nil {
			hdr[sandboxapi.HeaderControl] = v
		}
		code, _, m := a.doWith("POST", "/claim", `{"user":"mallory","token":"tok-mallory"}`, hdr)
		if code != 403 || !strings.HasSuffix(fmt.Sprint(m["type"]), "/"+sandboxapi.ProblemNotControl) {
			t.Fatalf("claim with control header %q: %d %v", v, code, m)
		}
	}
	if _, err := os.Stat(a.identityFile()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused claim wrote the identity: %v", err)
	}
	a.wantHealth(false, "")

	code, _, m := a.doWith("POST", "/claim", `{"user":"alice","token":"tok-alice"}`, control)
	if code != 200 || m["claimed"] != true || m["user"] != "alice" || m["token"] != nil {
		t.Fatalf("claim: %d %v", code, m)
	}
	a.wantHealth(true, "alice")
	if a.id.Token() != "tok-alice" {
		t.Fatalf("token %q", a.id.Token())
	}
}

func TestClaimByAnotherUserIsRefused(t *testing.T) {
	a := newAgent(t) // claimed by u
	before, err := os.ReadFile(a.identityFile())
	if err != nil {
		t.Fatal(err)
	}
	code, _, m := a.doWith("POST", "/claim", `{"user":"mallory","token":"tok-mallory"}`, control)
	if code != 409 || !strings.HasSuffix(fmt.Sprint(m["type"]), "/"+sandboxapi.ProblemClaimedByOther) {
		t.Fatalf("claim by another user: %d %v", code, m)
	}
	if after, _ := os.ReadFile(a.identityFile()); string(after) != string(before) {
		t.Fatalf("the identity file changed: %s -> %s", before, after)
	}
	a.wantHealth(true, "u")

	// The same user again: the manager rotated the token.
	if code, _, m := a.doWith("POST", "/claim", `{"user":"u","token":"tok-rotated"}`, control); code != 200 {
		t.Fatalf("token rotation: %d %v", code, m)
	}
	if a.id.Token() != "tok-rotated" {
		t.Fatalf("token %q after rotation", a.id.Token())
	}
	if a.prompt("hi")["reply"] != "echo: hi" { // the model client sends the new token
		t.Fatal("no reply after the rotation")
	}
}

// A claim if_unclaimed (the manager's claim from the warm pool) does not
// rotate: the agent answers claimed-already and keeps its token.
func TestClaimIfUnclaimedDoesNotRotate(t *testing.T) {
	a := newAgent(t) // claimed by u
	token := a.id.Token()
	code, _, m := a.doWith("POST", "/claim", `{"user":"u","token":"tok-other","if_unclaimed":true}`, control)
	if code != 409 || !strings.HasSuffix(fmt.Sprint(m["type"]), "/"+sandboxapi.ProblemClaimedAlready) {
		t.Fatalf("claim if_unclaimed of a claimed sandbox: %d %v", code, m)
	}
	if a.id.Token() != token {
		t.Fatalf("token %q, want %q kept", a.id.Token(), token)
	}
	code, _, m = a.doWith("POST", "/claim", `{"user":"mallory","token":"tok-mallory","if_unclaimed":true}`, control)
	if code != 409 || !strings.HasSuffix(fmt.Sprint(m["type"]), "/"+sandboxapi.ProblemClaimedByOther) {
		t.Fatalf("claim if_unclaimed by another user: %d %v", code, m)
	}
	fresh := startAgent(t, t.TempDir(), "")
	if code, _, m := fresh.doWith("POST", "/claim", `{"user":"alice","token":"tok-alice","if_unclaimed":true}`, control); code != 200 || m["user"] != "alice" {
		t.Fatalf("claim if_unclaimed of a fresh sandbox: %d %v", code, m)
	}
}

func TestBadClaimsWriteNothing(t *testing.T) {
	a := startAgent(t, t.TempDir(), "")
	for _, body := range []string{
		`{"user":"a/b","token":"tok"}`,
		`{"user":"","token":"tok"}`,
		`{"user":"alice","token":""}`,
		`{"user":"alice","token":"tok with space"}`,
		`{"user":"alice","token":"` + strings.Repeat("t", identity.MaxToken+1) + `"}`,
		`{"user":"alice","token":"tok","admin":true}`,
		`{"user":"alice","token":"tok"} {"user":"bob","token":"tok"}`,
		`not json`,
	} {
		if code, _, m := a.doWith("POST", "/claim", body, control); code != 400 {
			t.Errorf("claim %s: %d %v", body, code, m)
		}
	}
	if _, err := os.Stat(a.identityFile()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a bad claim wrote the identity: %v", err)
	}
	a.wantHealth(false, "")
}

func TestUnclaimedAgentAnswersOnlyHealthAndClaim(t *testing.T) {
	a := startAgent(t, t.TempDir(), "")
	for _, r := range [][3]string{
		{"GET", "/status", ""},
		{"POST", "/prompt", `{"text":"hi"}`},
		{"POST", "/wake", ""},
		{"POST", "/pause?if_idle=1", ""},
		{"GET", "/session", ""},
		{"GET", "/files", ""},
		{"PUT", "/uploads/x.txt", "x"},
		{"POST", "/ingest?name=a.txt", "some text"},
		{"GET", "/claim", ""},
		{"GET", "/no-such-route", ""},
	} {
		code, hdr, m := a.doWith(r[0], r[1], r[2], nil)
		if code != 503 || hdr.Get("Retry-After") != "1" || !strings.HasSuffix(fmt.Sprint(m["type"]), "/"+sandboxapi.ProblemUnclaimed) {
			t.Errorf("%s %s unclaimed: %d Retry-After %q %v", r[0], r[1], code, hdr.Get("Retry-After"), m)
		}
	}
	a.wantHealth(false, "")
	for _, p := range []string{a.db, a.ws, filepath.Join(filepath.Dir(a.db), "corpus"), filepath.Join(filepath.Dir(a.db), "status.json")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("an unclaimed agent wrote %s", p)
		}
	}
}

func TestIdentitySurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	a := startAgent(t, dir, "")
	if code, _, m := a.doWith("POST", "/claim", `{"user":"alice","token":"tok-alice"}`, control); code != 200 {
		t.Fatalf("claim: %d %v", code, m)
	}
	a.prompt("hi")
	a.http.Close()
	a.srv.Close()

	b := startAgent(t, dir, "")
	b.wantHealth(true, "alice")
	if _, st := b.do("GET", "/status", ""); st["user"] != "alice" {
		t.Fatalf("status after the restart: %v", st)
	}
	if code, _, m := b.doWith("POST", "/claim", `{"user":"bob","token":"tok-bob"}`, control); code != 409 {
		t.Fatalf("claim by another user after the restart: %d %v", code, m)
	}
	if b.id.Token() != "tok-alice" {
		t.Fatalf("token %q after the restart", b.id.Token())
	}
	b.prompt("again")
}

// A program inside the sandbox cannot claim it, even with the header.
func TestClaimFromInsideTheSandboxIsRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "session.db")
	s := server.New(server.Config{Identity: identityOf(t, db, ""), SessionDB: db, Workspace: filepath.Join(dir, "ws"),
		DefaultModel: "fake/echo", Caller: netip.MustParseAddr("10.213.0.14"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer s.Close()
	h := httptest.NewServer(s.Handler()) // the test client comes from 127.0.0.1
	defer h.Close()
	req, _ := http.NewRequest("POST", h.URL+"/claim", strings.NewReader(`{"user":"mallory","token":"tok-mallory"}`))
	req.Header.Set(sandboxapi.HeaderControl, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("claim from another address: %d", resp.StatusCode)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", identity.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused claim wrote the identity: %v", err)
	}
}

// The model's file tools run in the agent's process, which may read the
// data directory: they must not reach identity.json, by path or by link.
func TestFileToolsCannotReadTheIdentity(t *testing.T) {
	a := newAgent(t)
	os.MkdirAll(a.ws, 0o755)
	if err := os.Symlink(a.identityFile(), filepath.Join(a.ws, "id.json")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"id.json", "../data/" + identity.FileName, a.identityFile()} {
		reply := a.prompt("read " + p)["reply"].(string)
		if strings.Contains(reply, a.id.Token()) {
			t.Fatalf("read %s: the token reached the model: %q", p, reply)
		}
	}
}

// The agent answers the control routes in sandboxapi's types, field for
// field: this test is the manager's side, spoken with the contract alone
// (manager/agentclient's tests speak it against a fake agent).
func TestControlContract(t *testing.T) {
	a := startAgent(t, t.TempDir(), "")
	// call decodes a 2xx answer into out, strictly; it returns the status
	// and, for any other answer, the problem's type.
	call := func(method, path string, body, out any) (int, string) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, a.http.URL+path, bytes.NewReader(b))
		req.Header.Set(sandboxapi.HeaderControl, "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p problem.Problem
		dec := json.NewDecoder(resp.Body)
		if resp.StatusCode/100 == 2 {
			dec.DisallowUnknownFields()
		} else {
			out = &p
		}
		if err := dec.Decode(out); err != nil {
			t.Fatalf("%s %s: %d, the answer is not a %T: %v", method, path, resp.StatusCode, out, err)
		}
		return resp.StatusCode, p.Type[strings.LastIndex(p.Type, "/")+1:]
	}
	var h sandboxapi.Health
	if code, _ := call("GET", sandboxapi.HealthPath, nil, &h); code != 200 || h != (sandboxapi.Health{Status: "ok"}) {
		t.Fatalf("health unclaimed: %d %+v", code, h)
	}
	if code, _ := call("POST", sandboxapi.ClaimPath, sandboxapi.Claim{User: "alice", Token: "tok-alice"}, &h); code != 200 || h != (sandboxapi.Health{Status: "ok", Claimed: true, User: "alice"}) {
		t.Fatalf("claim: %d %+v", code, h)
	}
	if code, kind := call("POST", sandboxapi.ClaimPath, sandboxapi.Claim{User: "bob", Token: "tok-bob"}, &h); code != 409 || kind != sandboxapi.ProblemClaimedByOther {
		t.Fatalf("claim by bob: %d %s", code, kind)
	}
	if code, kind := call("POST", sandboxapi.ClaimPath, sandboxapi.Claim{User: "alice", Token: "bad token"}, &h); code != 400 || kind != sandboxapi.ProblemBadClaim {
		t.Fatalf("malformed claim: %d %s", code, kind)
	}
	var pa sandboxapi.PauseAnswer
	if code, _ := call("POST", sandboxapi.PausePath+"?"+sandboxapi.IfIdle+"=1", nil, &pa); code != 200 || pa.NextWakeAt != nil {
		t.Fatalf("pause if idle: %d %+v", code, pa)
	}
	var wa sandboxapi.WakeAnswer
	if code, _ := call("POST", sandboxapi.WakePath, nil, &wa); code != 200 {
		t.Fatalf("wake: %d %+v", code, wa)
	}
}
