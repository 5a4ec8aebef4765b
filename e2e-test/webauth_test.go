//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// send makes one request through Caddy with a JSON body and headers.
func send(t *testing.T, method, path, body string, hdr map[string]string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, baseURL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp, m
}

func sessionCookie(t *testing.T, resp *http.Response) string {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == "better-auth.session_token" {
			if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
				t.Fatalf("session cookie without HttpOnly and SameSite=Lax: %+v", c)
			}
			return c.Value
		}
	}
	t.Fatalf("no session cookie in %v", resp.Header)
	return ""
}

// signUpInvited makes a new user named prefix-<random> through an invite
// and the web sign-up, with the password "a long password", and returns it
// with its session cookie.
func signUpInvited(t *testing.T, prefix string) (string, map[string]string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	user := prefix + "-" + hex.EncodeToString(b)
	reportOnFailure(t, user)
	code := strings.TrimSpace(docker(t, "exec", managerName(), "/bin/affido", "admin", "invite", user))
	resp, m := send(t, "POST", "/auth/sign-up", fmt.Sprintf(`{"user":%q,"password":"a long password","invite":%q}`, user, code), nil)
	if resp.StatusCode != 200 || m["user"] != user {
		t.Fatalf("invited sign-up: %d %v", resp.StatusCode, m)
	}
	return user, map[string]string{"Cookie": "better-auth.session_token=" + sessionCookie(t, resp)}
}

// Sign-in against the real registry through Caddy: the seeded dev user, an
// invited user, sessions and API tokens, and what is refused.
func TestWebSignInAccountsAndTokens(t *testing.T) {
	t.Parallel()
	resp, m := send(t, "POST", "/auth/sign-in", `{"user":"dev-user","password":"dev-password"}`, nil)
	if resp.StatusCode != 200 || m["user"] != "dev-user" {
		t.Fatalf("sign in as the dev user: %d %v", resp.StatusCode, m)
	}
	devSession := sessionCookie(t, resp)
	cookie := map[string]string{"Cookie": "better-auth.session_token=" + devSession}
	// The registry keeps only the session token's sha256 (issue 28).
	if n := psql(t, "SELECT count(*) FROM session s WHERE strpos(row_to_json(s)::text, '"+devSession+"') > 0"); n != "0" {
		t.Fatalf("%s session rows hold the cookie's token in clear", n)
	}
	if n := psql(t, "SELECT count(*) FROM session WHERE token_hash = sha256(convert_to('"+devSession+"', 'UTF8'))"); n != "1" {
		t.Fatalf("%s session rows hold the cookie's sha256, want 1", n)
	}
	if r := request(t, "GET", "/u/dev-user/health", cookie); r.Code != 200 || !strings.HasPrefix(r.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Fatalf("the new session reaches the sandbox, whose answers run sandboxed: %d %s %v", r.Code, r.Body, r.Header)
	}
	if resp, _ := send(t, "POST", "/auth/sign-in", `{"user":"dev-user","password":"wrong-password"}`, nil); resp.StatusCode != 401 {
		t.Fatalf("a wrong password: %d", resp.StatusCode)
	}
	if resp, _ := send(t, "POST", "/auth/sign-in", `{"user":"dev-user","password":"dev-password"}`,
		map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); resp.StatusCode != 403 {
		t.Fatalf("a cross-site sign-in: %d", resp.StatusCode)
	}

	// An invited user signs up once, then signs in; open sign-up is off.
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	user := "web-" + hex.EncodeToString(b)
	if resp, _ := send(t, "POST", "/auth/sign-up", fmt.Sprintf(`{"user":%q,"password":"a long password"}`, user), nil); resp.StatusCode != 403 {
		t.Fatalf("sign-up without an invite: %d", resp.StatusCode)
	}
	reportOnFailure(t, user)
	code := strings.TrimSpace(docker(t, "exec", managerName(), "/bin/affido", "admin", "invite", user))
	body := fmt.Sprintf(`{"user":%q,"password":"a long password","invite":%q}`, user, code)
	resp, m = send(t, "POST", "/auth/sign-up", body, nil)
	if resp.StatusCode != 200 || m["user"] != user {
		t.Fatalf("invited sign-up: %d %v", resp.StatusCode, m)
	}
	own := map[string]string{"Cookie": "better-auth.session_token=" + sessionCookie(t, resp)}
	if resp, _ := send(t, "POST", "/auth/sign-up", body, nil); resp.StatusCode != 403 {
		t.Fatalf("the invite a second time: %d", resp.StatusCode)
	}
	if r := request(t, "GET", "/u/dev-user/health", own); r.Code != 403 {
		t.Fatalf("another user's sandbox: %d", r.Code)
	}

	// A named API token is shown once and works as a bearer token until revoked.
	resp, m = send(t, "POST", "/api/tokens", `{"name":"laptop"}`, own)
	tok, _ := m["token"].(string)
	if resp.StatusCode != 201 || tok == "" {
		t.Fatalf("create a token: %d %v", resp.StatusCode, m)
	}
	_, list := send(t, "GET", "/api/tokens", "", own)
	if raw, _ := json.Marshal(list); strings.Contains(string(raw), tok) || !strings.Contains(string(raw), "laptop") {
		t.Fatalf("token list %s", raw)
	}
	if resp, m := send(t, "GET", "/api/me", "", bearer(tok)); resp.StatusCode != 200 || m["user"] != user {
		t.Fatalf("the token: %d %v", resp.StatusCode, m)
	}
	if resp, _ := send(t, "DELETE", fmt.Sprintf("/api/tokens/%d", int(m["id"].(float64))), "", map[string]string{"Cookie": own["Cookie"], "Content-Type": "application/json"}); resp.StatusCode != 200 {
		t.Fatalf("revoke the token: %d", resp.StatusCode)
	}
	if resp, _ := send(t, "GET", "/api/me", "", bearer(tok)); resp.StatusCode != 401 {
		t.Fatalf("a revoked token: %d", resp.StatusCode)
	}

	// Sessions: listed with the current one marked, revoked, signed out.
	_, ss := send(t, "GET", "/api/sessions", "", own)
	sessions, _ := ss["sessions"].([]any)
	if len(sessions) != 1 || sessions[0].(map[string]any)["current"] != true {
		t.Fatalf("sessions %v", ss)
	}
	resp, _ = send(t, "POST", "/auth/sign-in", fmt.Sprintf(`{"user":%q,"password":"a long password"}`, user), nil)
	second := map[string]string{"Cookie": "better-auth.session_token=" + sessionCookie(t, resp)}
	id := int(sessions[0].(map[string]any)["id"].(float64))
	if resp, _ := send(t, "DELETE", fmt.Sprintf("/api/sessions/%d", id), "", map[string]string{"Cookie": second["Cookie"], "Content-Type": "application/json"}); resp.StatusCode != 200 {
		t.Fatalf("revoke the first session: %d", resp.StatusCode)
	}
	if resp, _ := send(t, "GET", "/api/me", "", own); resp.StatusCode != 401 {
		t.Fatalf("a revoked session: %d", resp.StatusCode)
	}
	if resp, _ := send(t, "POST", "/auth/sign-out", "", map[string]string{"Cookie": second["Cookie"], "Content-Type": "application/json"}); resp.StatusCode != 204 {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	if resp, _ := send(t, "GET", "/api/me", "", second); resp.StatusCode != 401 {
		t.Fatalf("after sign-out: %d", resp.StatusCode)
	}
}

// Wrong passwords lock one account, not the address (issue 28): after 5
// for a new user, its right password is refused, 429 account-locked with
// Retry-After, while dev-user signs in from the same address.
func TestWebWrongPasswordsLockOneAccount(t *testing.T) {
	t.Parallel()
	user, _ := signUpInvited(t, "lock")
	for i := range 5 {
		if resp, _ := send(t, "POST", "/auth/sign-in", fmt.Sprintf(`{"user":%q,"password":"wrong password"}`, user), nil); resp.StatusCode != 401 {
			t.Fatalf("wrong password %d: %d", i+1, resp.StatusCode)
		}
	}
	resp, m := send(t, "POST", "/auth/sign-in", fmt.Sprintf(`{"user":%q,"password":"a long password"}`, user), nil)
	if typ, _ := m["type"].(string); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.HasSuffix(typ, "/account-locked") {
		t.Fatalf("the right password while locked: %d %v %v", resp.StatusCode, resp.Header, m)
	}
	if resp, m := send(t, "POST", "/auth/sign-in", `{"user":"dev-user","password":"dev-password"}`, nil); resp.StatusCode != 200 {
		t.Fatalf("another account from the same address: %d %v", resp.StatusCode, m)
	}
}
