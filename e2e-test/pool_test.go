//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// admin runs `affido admin ARGS` in the manager.
func admin(t *testing.T, args ...string) string {
	t.Helper()
	return docker(t, append([]string{"exec", managerName(), "/bin/affido", "admin"}, args...)...)
}

// poolReady counts the warm pool's ready sandboxes.
func poolReady(t *testing.T) int {
	n, _ := strconv.Atoi(psql(t, "SELECT count(*) FROM pool_sandboxes WHERE state = 'ready'"))
	return n
}

// setPool sizes the warm pool and, with wait, waits until that many are
// ready. The test puts the pool back to empty when it ends.
func setPool(t *testing.T, size int, wait bool) {
	t.Helper()
	admin(t, "pool", "--size", strconv.Itoa(size))
	t.Cleanup(func() {
		admin(t, "pool", "--size", "0", "--drain")
		waitUntil(t, 60*time.Second, "the pool drained", func() bool { return psql(t, "SELECT count(*) FROM pool_sandboxes") == "0" })
	})
	if wait {
		waitUntil(t, 3*time.Minute, fmt.Sprintf("%d ready pool sandboxes", size), func() bool { return poolReady(t) >= size })
	}
}

// newUsers makes n users with tokens.
func newUsers(t *testing.T, prefix string, n int) (users, toks []string) {
	for i := range n {
		u, tok := newUser(t, fmt.Sprintf("%s%d", prefix, i))
		users, toks = append(users, u), append(toks, tok)
	}
	return users, toks
}

// burst sends every user's first request at once and returns the codes.
func burst(t *testing.T, users, toks []string) []int {
	codes := make([]int, len(users))
	var wg sync.WaitGroup
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = request(t, "GET", "/u/"+users[i]+"/status", bearer(toks[i])).Code
		}()
	}
	wg.Wait()
	return codes
}

// A burst of 20 new users, with the pool empty and with it full: every one
// gets 200 and exactly one sandbox (from the pool, when there is one).
func TestBurstOfNewUsers(t *testing.T) {
	mustRunAlone(t, "it times 20 bring-ups at once, which another stack's tests slowed past the provision timeout")
	for _, full := range []bool{false, true} {
		t.Run(map[bool]string{false: "empty pool", true: "full pool"}[full], func(t *testing.T) {
			if full {
				setPool(t, 20, true)
				admin(t, "pool", "--size", "0") // no refill during the burst: every pool sandbox counted is a claim
			}
			users, toks := newUsers(t, map[bool]string{false: "be", true: "bf"}[full], 20)
			start := time.Now()
			codes := burst(t, users, toks)
			took := time.Since(start)
			// Counted at once, before the test stack's idle tiers (seconds) take
			// any container away.
			objs := stackObjects(t)
			names := map[string]bool{}
			for i, u := range users {
				if codes[i] != 200 {
					t.Errorf("%s: %d", u, codes[i])
				}
				name := sandboxName(t, u)
				if names[name] {
					t.Errorf("%s given to two users", name)
				}
				names[name] = true
				if full != strings.HasPrefix(name, "pool.") {
					t.Errorf("%s's sandbox is %q (pool full: %v)", u, name, full)
				}
				// On a busy machine the idle tiers may have removed an early
				// container already (its network and volumes stay): the
				// audit trail says how many were made.
				if o := objs[name]; o[0] > 1 || o[1] != 1 || o[2] != 2 {
					t.Errorf("%s: %d containers, %d networks, %d volumes; want 1 (or 0, removed idle), 1, 2", u, o[0], o[1], o[2])
				}
				created := psql(t, "SELECT count(*) FROM audit_events WHERE user_id = '"+u+"' AND kind = 'sandbox.created'")
				if want := map[bool]string{false: "1", true: "0"}[full]; created != want {
					t.Errorf("%s: %s containers created, want %s (pool full: %v)", u, created, want, full)
				}
			}
			t.Logf("burst of 20 new users (pool full: %v): all answered in %v", full, took.Round(time.Millisecond))
		})
	}
}

// stackObjects counts the stack's containers, networks and volumes by
// sandbox name, each kind in one listing.
func stackObjects(t *testing.T) map[string][3]int {
	t.Helper()
	out := map[string][3]int{}
	for i, args := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
		list := docker(t, append(args, "--filter", "label=affido.stack="+stack, "--format", `{{.Label "affido.sandbox"}}`)...)
		for _, name := range strings.Fields(list) {
			o := out[name]
			o[i]++
			out[name] = o
		}
	}
	return out
}

// A sandbox claimed from the pool keeps its data (under its pool names)
// across evict and reprovision and a manager restart; a reset removes its
// pool-named volumes.
func TestClaimedSandboxKeepsItsData(t *testing.T) {
	setPool(t, 1, true)
	user, tok := newUser(t, "claimed")
	put := func() int {
		req, _ := http.NewRequest("PUT", baseURL+"/u/"+user+"/uploads/note.txt", strings.NewReader("kept"))
		req.Header.Set("Authorization", "Bearer "+tok)
		r, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	if c := put(); c/100 != 2 {
		t.Fatalf("upload: %d", c)
	}
	name := sandboxName(t, user)
	if !strings.HasPrefix(name, "pool.") {
		t.Fatalf("sandbox %q did not come from the pool", name)
	}
	kept := func(when string) {
		t.Helper()
		var r response
		waitUntil(t, 30*time.Second, "the file "+when, func() bool {
			r = request(t, "GET", "/u/"+user+"/uploads/note.txt", bearer(tok))
			return r.Code == 200
		})
		if r.Body != "kept" {
			t.Fatalf("%s: %q", when, r.Body)
		}
	}
	admin(t, "evict", user)
	kept("after evict and reprovision")
	if c, _, v := objectsOf(t, name); c != 1 || v != 2 {
		t.Fatalf("after reprovision: %d containers, %d volumes under %s", c, v, name)
	}
	docker(t, "restart", managerName())
	waitManagerHealthy(t)
	kept("after a manager restart")
	admin(t, "reset", user)
	if c, n, v := objectsOf(t, name); c+n+v != 0 {
		t.Fatalf("reset left %d containers, %d networks, %d volumes named %s", c, n, v, name)
	}
}

// A manager SIGKILLed in the middle of a claim leaves no sandbox bound to
// two users and none lost: the next manager adopts it as the user's (its
// agent bound on the first request) or it is still in the pool.
func TestManagerKilledMidClaim(t *testing.T) {
	setPool(t, 3, true)
	for i, delay := range []time.Duration{5 * time.Millisecond, 25 * time.Millisecond, time.Duration(rand.IntN(60)) * time.Millisecond} {
		t.Run(fmt.Sprintf("kill after %v", delay), func(t *testing.T) {
			waitUntil(t, 2*time.Minute, "a ready pool sandbox", func() bool { return poolReady(t) >= 1 })
			user, tok := newUser(t, fmt.Sprintf("kclaim%d", i))
			if r := killManagerDuringFirstRequest(t, user, tok, delay); statusUser(t, r) != user {
				t.Fatalf("after restart the agent says it is %q's", statusUser(t, r))
			}
			name := sandboxName(t, user)
			if c, n, v := objectsOf(t, name); c != 1 || n != 1 || v != 2 {
				t.Fatalf("%s: %d containers, %d networks, %d volumes", name, c, n, v)
			}
			if both := psql(t, "SELECT count(*) FROM sandboxes s JOIN pool_sandboxes p ON p.name = s.name"); both != "0" {
				t.Fatalf("%s sandboxes are both a user's and the pool's", both)
			}
			if twice := psql(t, "SELECT count(*) FROM (SELECT name FROM sandboxes GROUP BY name HAVING count(*) > 1) d"); twice != "0" {
				t.Fatalf("%s sandboxes bound to two users", twice)
			}
			// Every pool container has a row (none lost, none stray), once the
			// new manager has retired what was half built.
			waitUntil(t, 60*time.Second, "pool containers and rows to agree", func() bool {
				out := strings.TrimSpace(docker(t, "ps", "-a", "--filter", "label=affido.stack="+stack, "--filter", "label=affido.pool=true", "--format", `{{.Label "affido.sandbox"}}`))
				rows := map[string]bool{}
				for _, n := range strings.Fields(psql(t, "SELECT name FROM pool_sandboxes UNION ALL SELECT name FROM sandboxes")) {
					rows[n] = true
				}
				for _, n := range strings.Fields(out) {
					if !rows[n] {
						return false
					}
				}
				return true
			})
		})
	}
}

// A sandbox with a request in flight (a long-lived event stream) is not
// paused when the capacity rule needs room: the newcomer is told to come
// back (429), the stream goes on; once it ends, the newcomer gets the slot.
func TestNotPausedUnderALongRequest(t *testing.T) {
	holder, hTok := newUser(t, "hold")
	newcomer, nTok := newUser(t, "room")
	mustGet(t, holder, hTok, "/status")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", baseURL+"/u/"+holder+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+hTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("event stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	admin(t, "capacity", "1")
	t.Cleanup(func() { admin(t, "capacity", "0") })
	// Other tests' idle sandboxes are paused to make room; the holder is not.
	waitUntil(t, 30*time.Second, "the newcomer refused for want of room", func() bool {
		r := request(t, "GET", "/u/"+newcomer+"/status", bearer(nTok))
		return r.Code == 429 && r.Header.Get("Retry-After") != ""
	})
	for range 3 {
		if r := request(t, "GET", "/u/"+newcomer+"/status", bearer(nTok)); r.Code != 429 {
			t.Fatalf("newcomer while the stream is open: %d", r.Code)
		}
		if s := containerStatus(holder); s != "running" {
			t.Fatalf("the holder is %s under its open stream", s)
		}
	}
	// The stream still carries the holder's work.
	prompt(t, holder, hTok, map[string]any{"text": "still here?"})
	waitUntil(t, 30*time.Second, "the reply on the open stream", func() bool {
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the stream ended")
				}
				if strings.Contains(l, "still here?") {
					return true
				}
			default:
				return false
			}
		}
	})
	cancel() // the request ends
	waitUntil(t, 30*time.Second, "room for the newcomer once the stream ended", func() bool {
		return request(t, "GET", "/u/"+newcomer+"/status", bearer(nTok)).Code == 200
	})
	if s := containerStatus(holder); s != "paused" {
		t.Fatalf("the holder is %s; it should have been paused to make room", s)
	}
}
