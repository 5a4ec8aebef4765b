package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// texts is the body of a POST /api/render with n texts.
func texts(n int) string {
	b, _ := json.Marshal(map[string]any{"texts": make([]string, n)})
	return string(b)
}

// Who may render and what is refused: tried without credentials, from
// another site, as a form, with too many texts, too large a body, and
// bodies that are not {"texts": [...]}.
func TestRenderRefusals(t *testing.T) {
	e := newAuthEnv(t, false)
	resp, _ := do(t, e.srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	ok := `{"texts":["hi"]}`
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		body string
		code int
		kind string
	}{
		{"signed in", withCookie(c), ok, 200, ""},
		{"without credentials", nil, ok, 401, "unauthenticated"},
		{"with an unknown session", map[string]string{"Cookie": SessionCookie + "=nobody"}, ok, 401, "unauthenticated"},
		{"sent by another site's page", withCookie(c, "Sec-Fetch-Site", "cross-site"), ok, 403, "cross-site"},
		{"from another origin", withCookie(c, "Origin", "https://evil.example"), ok, 403, "cross-site"},
		{"as a form", withCookie(c, "Content-Type", "application/x-www-form-urlencoded"), ok, 403, "cross-site"},
		{"64 texts, the most", withCookie(c), texts(MaxRenderTexts), 200, ""},
		{"65 texts", withCookie(c), texts(MaxRenderTexts + 1), 400, "too-many-texts"},
		{"a body over 1 MiB", withCookie(c), `{"texts":["` + strings.Repeat("a", MaxRenderBody) + `"]}`, 413, "too-large"},
		{"not JSON", withCookie(c), `texts=hi`, 400, "bad-json"},
		{"no texts", withCookie(c), `{}`, 400, "bad-json"},
		{"an unknown field", withCookie(c), `{"texts":["hi"],"unsafe":true}`, 400, "bad-json"},
		{"a second JSON value after the first", withCookie(c), ok + ok, 400, "bad-json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, m := do(t, e.srv, call{"POST", "/api/render", tc.body, tc.hdr})
			if resp.StatusCode != tc.code {
				t.Fatalf("got %d %v, want %d", resp.StatusCode, m, tc.code)
			}
			if tc.kind == "" {
				return
			}
			if kind, _ := m["type"].(string); !strings.HasSuffix(kind, "/"+tc.kind) || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %s %v, want the problem %s", resp.Header.Get("Content-Type"), m, tc.kind)
			}
		})
	}
}

// Texts come back rendered in their order, by cookie or API token; a
// script the model wrote comes back as text, not an element.
func TestRenderAnswersInOrder(t *testing.T) {
	e := newAuthEnv(t, false)
	resp, _ := do(t, e.srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	_, token, _ := e.acc.CreateNamedToken(context.Background(), "alice", "laptop")
	in := []string{"**bold**", "<script>alert(1)</script>", "Dogs dream. [cite:c7]", ""}
	want := []string{
		"<p><strong>bold</strong></p>\n",
		"<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n",
		`<p>Dogs dream. <a class="cite" data-cite="c7" href="#cite-c7">[c7]</a></p>` + "\n",
		"",
	}
	body, _ := json.Marshal(map[string]any{"texts": in})
	for name, hdr := range map[string]map[string]string{
		"cookie": withCookie(c),
		"token":  {"Authorization": "Bearer " + token},
	} {
		t.Run(name, func(t *testing.T) {
			resp, m := do(t, e.srv, call{"POST", "/api/render", string(body), hdr})
			if resp.StatusCode != 200 {
				t.Fatalf("got %d %v", resp.StatusCode, m)
			}
			got, _ := m["html"].([]any)
			if len(got) != len(want) {
				t.Fatalf("%d answers to %d texts: %v", len(got), len(want), m)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("text %d: %q, want %q", i, got[i], want[i])
				}
			}
		})
	}
	if _, m := do(t, e.srv, call{"POST", "/api/render", `{"texts":[]}`, withCookie(c)}); m["html"] == nil || len(m["html"].([]any)) != 0 {
		t.Fatalf("no texts: %v, want html []", m)
	}
}
