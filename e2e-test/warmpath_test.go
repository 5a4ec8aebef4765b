//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// warmRequests is how many requests warm every cache on the path (the
// manager's credential cache today; a decision cache in Caddy, issue 30)
// before a revoke.
const warmRequests = 20

// warm sends warmRequests GET /u/<user>/health with hdr and wants 200 from each.
func warm(t *testing.T, user string, hdr map[string]string) {
	t.Helper()
	for i := range warmRequests {
		if r := request(t, "GET", "/u/"+user+"/health", hdr); r.Code != 200 {
			t.Fatalf("warm request %d: %d %s", i, r.Code, r.Body)
		}
	}
}

// refusedNext wants the very next request with hdr refused with 401 and
// nothing of the sandbox's in the answer.
func refusedNext(t *testing.T, what, user string, hdr map[string]string) {
	t.Helper()
	r := request(t, "GET", "/u/"+user+"/health", hdr)
	if r.Code != 401 || strings.Contains(r.Body, `"ok"`) {
		t.Fatalf("%s, on the next request with every cache warm: %d %s", what, r.Code, r.Body)
	}
}

// Issue 30: whatever the warm path caches, a revoked API token, a revoked
// session and a signed-out session are refused on the very next request
// through Caddy, with every cache warm for them.
func TestWarmPathRevocation(t *testing.T) {
	t.Parallel()
	user, first := signUpInvited(t, "warm")
	resp, _ := send(t, "POST", "/auth/sign-in", fmt.Sprintf(`{"user":%q,"password":"a long password"}`, user), nil)
	second := map[string]string{"Cookie": "better-auth.session_token=" + sessionCookie(t, resp)}
	resp, m := send(t, "POST", "/api/tokens", `{"name":"warm"}`, first)
	tok, _ := m["token"].(string)
	if resp.StatusCode != 201 || tok == "" {
		t.Fatalf("create a token: %d %v", resp.StatusCode, m)
	}
	tokenID := int(m["id"].(float64))
	keepAwake(t, user, tok)
	_, ss := send(t, "GET", "/api/sessions", "", first)
	firstID := -1
	for _, s := range ss["sessions"].([]any) {
		if s := s.(map[string]any); s["current"] == true {
			firstID = int(s["id"].(float64))
		}
	}
	if firstID < 0 {
		t.Fatalf("no current session in %v", ss)
	}
	manage := map[string]string{"Cookie": second["Cookie"], "Content-Type": "application/json"}

	t.Run("a revoked API token", func(t *testing.T) {
		warm(t, user, bearer(tok))
		if resp, _ := send(t, "DELETE", fmt.Sprintf("/api/tokens/%d", tokenID), "", manage); resp.StatusCode != 200 {
			t.Fatalf("revoke the token: %d", resp.StatusCode)
		}
		refusedNext(t, "a revoked API token", user, bearer(tok))
	})
	t.Run("a session revoked by its id", func(t *testing.T) {
		warm(t, user, first)
		if resp, _ := send(t, "DELETE", fmt.Sprintf("/api/sessions/%d", firstID), "", manage); resp.StatusCode != 200 {
			t.Fatalf("revoke the first session: %d", resp.StatusCode)
		}
		refusedNext(t, "a revoked session", user, first)
	})
	t.Run("a signed-out session", func(t *testing.T) {
		warm(t, user, second)
		if resp, _ := send(t, "POST", "/auth/sign-out", "", manage); resp.StatusCode != 204 {
			t.Fatalf("sign out: %d", resp.StatusCode)
		}
		refusedNext(t, "a signed-out session", user, second)
	})
}

// Issue 30: a sandbox the idle tier paused while requests for it were
// cached at the edge answers the next request (the pause forgot the cached
// decision first, so the request brings it back instead of dialing a
// frozen container); and cached requests still count as activity.
func TestWarmPathPausedByTiers(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "warmtier")
	warm(t, user, bearer(tok))
	waitStatus(t, user, "paused", 20*time.Second)
	start := time.Now()
	if got := statusUser(t, mustGet(t, user, tok, "/status")); got != user {
		t.Fatalf("answered by %q", got)
	}
	t.Logf("paused by the tier, then answered in %v", time.Since(start).Round(time.Millisecond))

	// Activating requests, every one a cache hit, for longer than the
	// 3 s idle tier: the sandbox is never paused under them.
	mustGet(t, user, tok, "/session")
	until := time.Now().Add(6 * time.Second)
	for time.Now().Before(until) {
		mustGet(t, user, tok, "/session")
		if s := containerStatus(user); s != "running" {
			t.Fatalf("paused under activating requests: %s", s)
		}
		time.Sleep(200 * time.Millisecond) // the pace of a user, not a synchronisation
	}
}
