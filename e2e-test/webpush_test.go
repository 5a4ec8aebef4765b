//go:build e2e

package e2e

import (
	"bufio"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/internal/webpushtest"
)

// pushes are the Web Pushes the sink received at path, their bodies
// decoded from base64, with their VAPID headers.
type push struct {
	Path          string `json:"path"`
	BodyB64       string `json:"body_b64"`
	Authorization string `json:"authorization"`
	Encoding      string `json:"content_encoding"`
}

func pushesAt(t *testing.T, path string) []push {
	t.Helper()
	var out []push
	sc := bufio.NewScanner(strings.NewReader(docker(t, "logs", sinkName())))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var p push
		if json.Unmarshal(sc.Bytes(), &p) == nil && p.Path == path {
			out = append(out, p)
		}
	}
	return out
}

// A browser subscribed through the owner's session gets a Web Push for an
// approval raised by a named agent, through the manager's guarded client
// (the sink is the one address the test stack allows, and the one where a
// plain-http endpoint is taken): the body is encrypted for that browser
// (RFC 8291, decrypted here with its keys), signed with the manager's
// VAPID key, and says which agent waits. Sign-out drops the subscription:
// the next approval pushes nothing.
func TestWebPushReachesASubscribedBrowser(t *testing.T) {
	t.Parallel()
	startSink(t)
	user, password, tok := webUser(t, "push")
	mustPost(t, user, tok, "/agents", `{"name":"ops"}`, 201)
	resp, _ := send(t, "POST", "/auth/sign-in", fmt.Sprintf(`{"user":%q,"password":%q}`, user, password), nil)
	cookie := map[string]string{"Cookie": "better-auth.session_token=" + sessionCookie(t, resp)}

	// The browser's keys, as PushManager.subscribe makes them.
	browserKey, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	_, _ = rand.Read(auth)
	path := "/push/" + user
	endpoint := "http://" + env("AFFIDO_E2E_SINK_IP", "10.212.1.50") + ":9999" + path
	sub := fmt.Sprintf(`{"endpoint":%q,"keys":{"p256dh":%q,"auth":%q}}`, endpoint,
		base64.RawURLEncoding.EncodeToString(browserKey.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(auth))
	if r, m := send(t, "POST", "/api/push/subscriptions", sub, bearer(tok)); r.StatusCode != 403 {
		t.Fatalf("a subscription by API token: %d %v", r.StatusCode, m)
	}
	if r, m := send(t, "POST", "/api/push/subscriptions", strings.Replace(sub, "http://", "http://x", 1), cookie); r.StatusCode != 400 {
		t.Fatalf("a plain-http endpoint the operator did not allow: %d %v", r.StatusCode, m)
	}
	if r, m := send(t, "POST", "/api/push/subscriptions", sub, cookie); r.StatusCode != 201 {
		t.Fatalf("subscribe: %d %v", r.StatusCode, m)
	}
	var key struct {
		PublicKey string `json:"public_key"`
	}
	if err := json.Unmarshal([]byte(request(t, "GET", "/api/push/key", cookie).Body), &key); err != nil || key.PublicKey == "" {
		t.Fatalf("the VAPID key: %v", err)
	}

	if r := post(t, user+"/agents/ops", tok, "/prompt", `{"text":"run: echo pushed","wait":false}`); r.Code != 202 {
		t.Fatalf("prompt ops: %d %s", r.Code, r.Body)
	}
	var got []push
	waitUntil(t, 90*time.Second, "a push at the sink", func() bool { got = pushesAt(t, path); return len(got) > 0 })
	p := got[0]
	if p.Encoding != "aes128gcm" || !strings.HasPrefix(p.Authorization, "vapid t=") || !strings.Contains(p.Authorization, "k="+key.PublicKey) {
		t.Fatalf("push headers: encoding %q, authorization %q", p.Encoding, p.Authorization)
	}
	body, err := base64.StdEncoding.DecodeString(p.BodyB64)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := webpushtest.Decrypt(body, browserKey, auth)
	if err != nil {
		t.Fatalf("decrypt the push: %v", err)
	}
	var msg struct {
		Title, Body, Kind, Agent, URL string
	}
	if err := json.Unmarshal(plain, &msg); err != nil || msg.Kind != "approval" || msg.Agent != "ops" || !strings.Contains(msg.Body, "echo pushed") || !strings.HasPrefix(msg.URL, "/app/") {
		t.Fatalf("the push's message %s: %v", plain, err)
	}

	// Signed out, the browser hears nothing more.
	if r, _ := send(t, "POST", "/auth/sign-out", "", map[string]string{"Cookie": cookie["Cookie"], "Content-Type": "application/json"}); r.StatusCode >= 300 {
		t.Fatalf("sign-out: %d", r.StatusCode)
	}
	// The first run waits on its approval, and prompts take turns: deny it.
	var pending struct {
		Approvals []struct {
			ID int64 `json:"id"`
		} `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(mustGet(t, user+"/agents/ops", tok, "/approvals").Body), &pending); err != nil || len(pending.Approvals) != 1 {
		t.Fatalf("ops' approvals: %v %+v", err, pending)
	}
	mustPost(t, user+"/agents/ops", tok, fmt.Sprintf("/approvals/%d", pending.Approvals[0].ID), `{"decision":"deny","wait":false}`, 200)
	if r := post(t, user+"/agents/ops", tok, "/prompt", `{"text":"run: echo after sign-out","wait":false}`); r.Code != 202 {
		t.Fatalf("prompt ops again: %d %s", r.Code, r.Body)
	}
	// The approval's notification is delivered (no URL, no subscription:
	// it ends no_endpoint); by then a push would have been sent.
	waitUntil(t, 90*time.Second, "the second approval's notification settled", func() bool {
		return psql(t, fmt.Sprintf(`SELECT count(*) FROM notifications WHERE user_id = '%s' AND status <> 'pending'`, user)) == "2"
	})
	if n := len(pushesAt(t, path)); n != 1 {
		t.Fatalf("%d pushes after sign-out, want the first one only", n)
	}
}
