//go:build e2e

package e2e

// The attacks of issue 13, tried against the real stack the way a model
// steered by what it read (or a hostile user) would, using only the
// documented routes and the scripted model's run: rule. Each must be
// refused and leave nothing behind.

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func shellReply(t *testing.T, user, tok, command string) string {
	t.Helper()
	grant(t, user, tok, "shell")
	return prompt(t, user, tok, map[string]any{"text": "run: " + command}).Reply
}

// The gateway token is in no environment (the manager hands it to the
// agent over the control path; the agent keeps it in /data); the tools
// cannot read any process's environment from /proc, nor anything under /data.
func TestAttackToolsCannotReadTheAgentsSecretsOrState(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-secrets")
	keepAwake(t, user, tok)
	if r := shellReply(t, user, tok, "cat /proc/1/environ | base64"); !strings.Contains(r, "Permission denied") {
		t.Errorf("reading the agent's environment: %q", r)
	}
	// Every process's environment the tools can read, all at once.
	r := shellReply(t, user, tok, `for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null; done | tr '\0' '\n'`)
	if strings.Contains(r, "AFFIDO_GATEWAY_TOKEN") {
		t.Errorf("the gateway token is readable by the tools: %q", r)
	}
	sbToken, _ := sandboxGateway(t, user)
	if strings.Contains(r, sbToken) {
		t.Errorf("the gateway token is in an environment the tools can read: %q", r)
	}
	if r := shellReply(t, user, tok, "cat /data/identity.json"); !strings.Contains(r, "Permission denied") || strings.Contains(r, sbToken) {
		t.Errorf("the tools read the agent's identity: %q", r)
	}
	for _, cmd := range []string{"ls /data", "head -c 16 /data/session.db", "mkdir -p /data/corpus/planted.txt", "echo x > /data/skills/csv-summary.json"} {
		if r := shellReply(t, user, tok, cmd); !strings.Contains(r, "Permission denied") || !strings.Contains(r, "exit 1") && !strings.Contains(r, "exit 2") {
			t.Errorf("%s: %q", cmd, r)
		}
	}
	if _, err := inAgentAs(t, user, tok, "agent", "ls", "/data/corpus/planted.txt"); err == nil {
		t.Error("the shell planted a document in the corpus")
	}
	// The agent runs as its own uid; after start-up no process holds a capability.
	status := mustInAgent(t, user, tok, "sh", "-c", `for s in /proc/[0-9]*/status; do echo "$s $(grep -E '^(Uid|CapEff)' $s | tr '\t\n' '  ')"; done`)
	sawAgent := false
	for _, line := range strings.Split(strings.TrimSpace(status), "\n") {
		// (a process that ended between the listing and the read has no line to check)
		if strings.Contains(line, "CapEff:") && !strings.Contains(line, "CapEff: 0000000000000000") {
			t.Errorf("a process holds capabilities: %s", line)
		}
		if strings.HasPrefix(line, "/proc/1/status") {
			sawAgent = strings.Contains(line, "Uid: 10001 10001 10001 10001") && strings.Contains(line, "CapEff: 0000000000000000")
		}
	}
	if !sawAgent {
		t.Errorf("the agent (pid 1) does not run as uid 10001 without capabilities:\n%s", status)
	}
}

// A process the model starts in the background ends with its tool call,
// even one that detaches into a session of its own.
func TestAttackNoProcessOutlivesItsToolCall(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-bg")
	if r := shellReply(t, user, tok, "sleep 300 & (setsid sleep 301 &); echo started"); !strings.Contains(r, "started") {
		t.Fatalf("start: %q", r)
	}
	r := shellReply(t, user, tok, "ps")
	if strings.Contains(r, "sleep 30") {
		t.Fatalf("a background process outlived its call:\n%s", r)
	}
	// Limits per call: a file past RLIMIT_FSIZE stops the writer.
	r = shellReply(t, user, tok, `head -c 300000000 /dev/zero > big.bin; echo "rc=$?"; wc -c < big.bin; rm -f big.bin`)
	if !strings.Contains(r, "rc=153") || !strings.Contains(r, "268435456") {
		t.Errorf("writing past the 256 MiB file size limit: %q", r)
	}
}

// /dev/shm is a tmpfs outside the workspace quota that kept its content
// between calls (issue 28: 64 MiB to hide and stash data in). Now it is
// 8 MiB and empty at the next call: tried with a file, a hidden file and
// a read-only directory with a file in it.
func TestAttackShmKeepsNothingBetweenCalls(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-shm")
	r := shellReply(t, user, tok, `echo x > /dev/shm/a; echo y > /dev/shm/.h; mkdir -p /dev/shm/d; echo z > /dev/shm/d/f; chmod 500 /dev/shm/d; ls -A /dev/shm | wc -l; cat /proc/mounts`)
	if !strings.Contains(r, "\n3\n") {
		t.Fatalf("writing to /dev/shm: %q", r)
	}
	shm := ""
	for _, line := range strings.Split(r, "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[1] == "/dev/shm" {
			shm = f[3]
		}
	}
	if !strings.Contains(shm, "size=8192k") {
		t.Errorf("/dev/shm is mounted with %q, want size=8192k", shm)
	}
	if r := shellReply(t, user, tok, "ls -A /dev/shm | wc -l"); !strings.Contains(r, "\n0") {
		t.Fatalf("the next call finds /dev/shm holding: %q", r)
	}
}

// Nothing inside the sandbox can call the agent's API: not a program on
// localhost, not one using the container's own address.
func TestAttackAgentAPIAnswersOnlyCaddy(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-api")
	keepAwake(t, user, tok)
	name := stack + "-" + user + "-agent"
	own := ipOn(t, name, stack+"-"+user+"-net")
	for _, base := range []string{"http://127.0.0.1:8080", "http://" + own + ":8080"} {
		out, _ := dockerTry("run", "--rm", "--network", "container:"+name, "affido/probe:test", "-post", base+"/ingest?name=planted.txt", `"planted"`)
		if !strings.HasPrefix(out, "403") {
			t.Errorf("POST %s/ingest from inside the sandbox: %s", base, out)
		}
		out, _ = dockerTry("run", "--rm", "--network", "container:"+name, "affido/probe:test", "-post", base+"/skills/install", `{"name":"csv-summary"}`)
		if !strings.HasPrefix(out, "403") {
			t.Errorf("POST %s/skills/install from inside the sandbox: %s", base, out)
		}
	}
	if r := request(t, "GET", "/u/"+user+"/raw?doc=planted.txt&version=1", bearer(tok)); r.Code != 404 {
		t.Errorf("the planted document exists: %d %s", r.Code, r.Body)
	}
	if r := mustGet(t, user, tok, "/skills"); strings.Contains(r.Body, "csv-summary") {
		t.Errorf("a skill was installed from inside: %s", r.Body)
	}
}

// Notifications go through the guarded client: a URL that names Caddy's
// sandbox-control listener (by address, service name, container name or as
// an IPv4-mapped IPv6 address), or an allowed endpoint that redirects to the
// admin API or to that listener, delivers nothing there.
func TestAttackNotificationsCannotBeTurnedInward(t *testing.T) {
	t.Parallel()
	startSink(t)
	victim, victimTok := newUser(t, "atk-victim")
	mustGet(t, victim, victimTok, "/health")
	ep := psql(t, "SELECT endpoint FROM sandboxes WHERE user_id = '"+victim+"'")
	caddyIP := env("AFFIDO_CADDY_IP", "10.212.1.10")
	sink := "http://" + env("AFFIDO_E2E_SINK_IP", "10.212.1.50") + ":9999"
	chosen := "chosen-" + victim
	control := "/_sandbox/" + ep + "/prompt"
	urls := map[string]string{
		"address":             "http://" + caddyIP + ":8081" + control,
		"service name":        "http://caddy:8081" + control,
		"container name":      "http://" + caddyName() + ":8081" + control,
		"IPv4-mapped":         "http://[::ffff:" + caddyIP + "]:8081" + control,
		"loopback admin":      "http://127.0.0.1:9091/admin/session?user=" + victim + "&token=" + chosen,
		"redirect to admin":   sink + "/redirect?to=" + urlEscape("http://127.0.0.1:9091/admin/session?user="+victim+"&token="+chosen),
		"redirect to control": sink + "/redirect?to=" + urlEscape("http://"+caddyIP+":8081"+control),
	}
	t.Run("attacks", func(t *testing.T) {
		for what, u := range urls {
			t.Run(what, func(t *testing.T) {
				t.Parallel()
				user, tok := newUser(t, "atk-notify")
				docker(t, "exec", managerName(), "/bin/affido", "admin", "notify", user, u)
				setReminder(t, user, tok, time.Second, "ATTACK "+what)
				waitNotificationsSettled(t, user, "failed 5")
				if errs := psql(t, "SELECT string_agg(a.error, ' | ') FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id WHERE n.user_id = '"+user+"'"); !strings.Contains(errs, "outbound address refused") {
					t.Errorf("delivery errors do not say the guard refused: %s", errs)
				}
			})
		}
	})
	t.Run("nothing reached the victim", func(t *testing.T) {
		for _, e := range inspectOf(t, victim, victimTok).Entries.Items {
			if strings.Contains(e.Text, "ATTACK") {
				t.Errorf("an attacker's reminder reached the victim's conversation: %+v", e)
			}
		}
		if n := psql(t, "SELECT count(*) FROM session WHERE token_hash = sha256(convert_to('"+chosen+"', 'UTF8'))"); n != "0" {
			t.Errorf("a session was minted for the victim: %s", n)
		}
	})
	// The admin API is not on TCP at all.
	out := docker(t, "run", "--rm", "--network", "container:"+managerName(), "affido/probe:test", "127.0.0.1:9091")
	if !strings.Contains(out, "closed") {
		t.Errorf("the admin API listens on TCP: %s", out)
	}
}

// A page on another site cannot use the session cookie to write.
func TestAttackCrossSiteCookieWritesAreRefused(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-csrf")
	docker(t, "exec", managerName(), "/bin/affido", "admin", "session", user, "tok-"+user)
	cookie := "better-auth.session_token=tok-" + user
	send := func(path, origin, ctype, body string) response {
		req, _ := http.NewRequest("POST", baseURL+"/u/"+user+path, strings.NewReader(body))
		req.Header.Set("Cookie", cookie)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		req.Header.Set("Content-Type", ctype)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return response{resp.StatusCode, resp.Header, readAll(resp)}
	}
	for _, tc := range []struct{ what, path, origin, ctype, body string }{
		{"form POST to /prompt", "/prompt", "https://evil.example", "text/plain", `{"text":"run: touch pwned"}`},
		{"form POST to /ingest", "/ingest?name=evil.txt", "https://evil.example", "text/plain", "planted"},
		{"JSON from another origin", "/prompt", "https://evil.example", "application/json", `{"text":"run: touch pwned"}`},
		{"same origin but not JSON", "/prompt", baseURL, "text/plain", `{"text":"run: touch pwned"}`},
	} {
		if r := send(tc.path, tc.origin, tc.ctype, tc.body); r.Code != 403 || !strings.Contains(r.Body, "cross-site") {
			t.Errorf("%s: %d %s", tc.what, r.Code, r.Body)
		}
	}
	if in := inspectOf(t, user, tok); in.EntryCount != 0 {
		t.Errorf("a refused request wrote %d entries", in.EntryCount)
	}
	if r := request(t, "GET", "/u/"+user+"/raw?doc=evil.txt&version=1", bearer(tok)); r.Code != 404 {
		t.Errorf("a refused ingest stored the document: %d", r.Code)
	}
	// The page's own origin, with JSON, works; bearer tokens are unaffected.
	if r := send("/prompt", baseURL, "application/json", `{"text":"hello"}`); r.Code != 200 {
		t.Errorf("same-origin JSON: %d %s", r.Code, r.Body)
	}
	if r := post(t, user, tok, "/ingest?name=ok.txt", "fine"); r.Code != 201 && r.Code != 200 {
		t.Errorf("bearer ingest: %d %s", r.Code, r.Body)
	}
}

func urlEscape(s string) string {
	r := strings.NewReplacer("%", "%25", "&", "%26", "?", "%3F", "=", "%3D", ":", "%3A", "/", "%2F")
	return r.Replace(s)
}

// The control listener (Caddy :8081) adds the control header and connects
// from the one address agents trust; anything on the control network (a
// local user of a shared host) used it to read another user's rules and
// inspect. Tried from a container on the control network: no key, an
// empty one, a forged one, the caller key in its place → 401, and the
// agent is not reached.
func TestAttackControlListenerWithoutTheKey(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-ctl")
	keepAwake(t, user, tok)
	ep := psql(t, "SELECT endpoint FROM sandboxes WHERE user_id = '"+user+"'")
	caddy := env("AFFIDO_CADDY_IP", "10.212.1.10")
	for _, route := range []string{"/rules", "/inspect", "/health"} {
		url := "http://" + caddy + ":8081/_sandbox/" + ep + route
		for _, hdr := range [][]string{nil, {"X-Affido-Control-Key:"}, {"X-Affido-Control-Key:" + strings.Repeat("0", 64)},
			{"X-Affido-Control:1", "X-Affido-Caller:guess"}} {
			out := docker(t, append([]string{"run", "--rm", "--network", stack + "_control", "affido/probe:test", "-geth", url}, hdr...)...)
			if !strings.HasPrefix(out, "401 ") || !strings.Contains(out, "answers only the manager") {
				t.Errorf("%s with %q: %s", route, hdr, out)
			}
		}
	}
	// The manager's own calls still pass: the sandbox is reachable and woken by it.
	if r := prompt(t, user, tok, map[string]any{"text": "hello"}); r.Status != "done" {
		t.Fatalf("a prompt after the attempts: %+v", r)
	}
}

// Guessing tokens (issue 28): from one address (a container on the control
// network, so the rest of the suite keeps its own budget), guesses for one
// user past 20 get 429 with no credential lookup. From that same address,
// the user's own token, in use, still works, and so does another user's
// token the manager has never seen.
func TestAttackTokenGuessingIsThrottled(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-guess")
	other, otherTok := newUser(t, "atk-guess")
	mustGet(t, user, tok, "/health")
	mustGet(t, other, otherTok, "/health")
	fresh := token(t, other)
	base := "http://" + env("AFFIDO_CADDY_IP", "10.212.1.10") + ":8080/u/"
	args := []string{"run", "--rm", "--network", stack + "_control", "affido/probe:test", "-gets"}
	var want []string
	for i := range 25 {
		args = append(args, base+user+"/status", fmt.Sprintf("wrong-token-%d", i))
		if i < 20 {
			want = append(want, "401")
		} else {
			want = append(want, "429")
		}
	}
	args = append(args, base+user+"/status", tok, base+other+"/status", fresh)
	want = append(want, "200", "200")
	out := docker(t, args...)
	if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("codes\n got %s\nwant %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}

// One sandbox cannot queue notifications without end: past the cap
// (3 in the test stack) the gateway answers 429 and the reminders wait.
func TestAttackNotificationQueueIsCapped(t *testing.T) {
	t.Parallel()
	startSink(t)
	user, tok := reminderUser(t, "atk-flood", "/fail/flood")
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	grant(t, user, tok, "set_reminder")
	for i := range 5 {
		prompt(t, user, tok, map[string]any{"text": fmt.Sprintf("remind at %s: flood %d", past, i)})
	}
	// The first three are queued (and failing at the sink); the other two
	// were refused and wait in the sandbox to hand over again.
	waitUntil(t, 12*time.Second, "three notifications queued, two reminders waiting", func() bool {
		queued := psql(t, "SELECT count(*) FROM notifications WHERE user_id = '"+user+"'")
		sleeping := 0
		for _, tk := range inspectOf(t, user, tok).Tasks {
			if tk.State == "sleeping" {
				sleeping++
			}
		}
		return queued == "3" && sleeping == 2
	})
}

// A request body that never finishes arriving is cut off at the agent's
// body deadline (3 s in the test stack): the agent's handler ends, so the
// sandbox is no longer busy, although the client still holds its connection
// to Caddy (whose own bound is 15 min: see caddy/Caddyfile).
func TestAttackTrickledBodyIsCutOff(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-slow")
	mustGet(t, user, tok, "/session")
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /u/%s/uploads/slow.bin HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\nab",
		user, strings.TrimPrefix(baseURL, "http://"), tok)
	// In flight first: the upload handler has opened its temporary file.
	waitUntil(t, 30*time.Second, "the upload is inside the agent", func() bool {
		r := request(t, "GET", "/u/"+user+"/files?path=uploads", bearer(tok))
		return r.Code == 200 && strings.Contains(r.Body, ".slow.bin.tmp")
	})
	// Then cut off: nothing in flight any more, and nothing stored.
	waitUntil(t, 60*time.Second, "the agent let go of the trickled upload", func() bool {
		return post(t, user, tok, "/pause?if_idle=1", "").Code == 200
	})
	if r := request(t, "GET", "/u/"+user+"/files?path=uploads", bearer(tok)); strings.Contains(r.Body, "slow.bin") {
		t.Fatalf("the trickled upload left a file: %s", r.Body)
	}
}

// From inside a sandbox, with its own token, the official OpenAI Go SDK
// works against the gateway and shows why a model is refused; a body whose
// keys could mean two things is refused before it goes anywhere.
func TestGatewayFromInsideTheSandbox(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-gateway")
	keepAwake(t, user, tok)
	name := stack + "-" + user + "-agent"
	token, base := sandboxGateway(t, user)
	out := docker(t, "run", "--rm", "--network", "container:"+name, "affido/probe:test", "-sdk", base, token)
	for _, want := range []string{"models 3", "plain echo: hello sdk", "stream echo: streamed", "tool read_file", "refused 400 model \"not-served\" is not served here"} {
		if !strings.Contains(out, want+"\n") && !strings.Contains(out, want) {
			t.Errorf("SDK: no %q in\n%s", want, out)
		}
	}
	body := `{"model":"not-served","MODEL":"fake/echo","messages":[{"role":"user","content":"x"}]}`
	out, _ = dockerTry("run", "--rm", "--network", "container:"+name, "affido/probe:test", "-post", base+"chat/completions", body, token)
	if !strings.HasPrefix(out, "400") || !strings.Contains(out, "invalid_request_error") {
		t.Errorf("case-variant model key: %s", out)
	}
}

// The model's shell hides what it wrote from the owner: a directory and the
// file in it, a file, the directory an upload goes to (chmod 000), a sticky
// directory, and a skill's directory it replaced with a closed one. The
// agent's uid is shut out, yet the owner lists, reads, uploads into and
// deletes them through the API, and reinstalls the skill (the tool runner
// gives back what the tools' uid owns, agent/runner repair).
func TestAttackToolsCannotHideFilesFromTheOwner(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-hide")
	keepAwake(t, user, tok)
	if r := post(t, user, tok, "/skills/install", `{"name":"csv-summary"}`); r.Code != 201 {
		t.Fatalf("install: %d %s", r.Code, r.Body)
	}
	r := shellReply(t, user, tok, "mkdir -p secret uploads/closed && echo x > secret/f && echo y > hidden && "+
		"mkdir sticky && echo s > sticky/s && chmod 1770 sticky && "+
		"mv skills/csv-summary skills/moved && mkdir skills/csv-summary && echo extra > skills/csv-summary/extra && "+
		"chmod 000 secret/f secret hidden uploads/closed skills/csv-summary/extra skills/csv-summary && echo hidden-done")
	if !strings.Contains(r, "hidden-done") {
		t.Fatalf("the shell did not hide its files: %q", r)
	}
	if out, err := inAgentAs(t, user, tok, "agent", "ls", "/workspace/secret"); err == nil {
		t.Fatalf("the agent's uid still lists secret (%q): the attack tries nothing", out)
	}
	if r := mustGet(t, user, tok, "/files?path=secret"); !strings.Contains(r.Body, `"name":"f"`) {
		t.Errorf("listing secret: %s", r.Body)
	}
	for p, want := range map[string]string{"secret/f": "x\n", "hidden": "y\n"} {
		if r := mustGet(t, user, tok, "/file?path="+p); r.Body != want {
			t.Errorf("reading %s: %q", p, r.Body)
		}
	}
	req, _ := http.NewRequest("PUT", baseURL+"/u/"+user+"/uploads/closed/new.txt", strings.NewReader("new"))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Errorf("upload into a closed directory: %d", resp.StatusCode)
	}
	for _, p := range []string{"secret", "hidden", "sticky", "uploads/closed"} {
		if r := request(t, "DELETE", "/u/"+user+"/files?path="+p, bearer(tok)); r.Code != 200 {
			t.Errorf("deleting %s: %d %s", p, r.Code, r.Body)
		}
	}
	if r := mustGet(t, user, tok, "/files"); strings.Contains(r.Body, `"name":"secret"`) || strings.Contains(r.Body, `"name":"hidden"`) || strings.Contains(r.Body, `"name":"sticky"`) {
		t.Errorf("still listed after deleting: %s", r.Body)
	}
	if r := post(t, user, tok, "/skills/install", `{"name":"csv-summary"}`); r.Code != 201 {
		t.Fatalf("reinstall over the tampered directory: %d %s", r.Code, r.Body)
	}
	for _, s := range skillsOf(t, user, tok) {
		if s.Name == "csv-summary" && !s.OK {
			t.Errorf("csv-summary after the reinstall: %+v", s)
		}
	}
}

// Go profiles (issue 30) show what Caddy and the manager do with every
// user's requests. Neither a sandbox (from its own network, where only the
// gateway listener answers), nor a client (Caddy's published port), nor
// anything on the control network without the key gets one; the manager's
// are on its admin socket alone. The manager's key and the admin socket do.
func TestAttackProfilesAreNotServedToSandboxesOrClients(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "atk-prof")
	mustGet(t, user, tok, "/health")
	userNet := stack + "-" + user + "-net"
	control := stack + "_control"
	caddy := env("AFFIDO_CADDY_IP", "10.212.1.10")
	manager := ipOn(t, managerName(), control)
	probe := func(network, url string, hdr ...string) string {
		out, _ := dockerTry(append([]string{"run", "--rm", "--network", network, "affido/probe:test", "-geth", url}, hdr...)...)
		return out
	}
	for _, path := range []string{"/_profile/cpu?seconds=1", "/_profile/trace?seconds=1", "/debug/pprof/", "/debug/pprof/profile?seconds=1", "/admin/profile/cpu?seconds=1"} {
		if out := probe(userNet, "http://gateway:8088"+path); !strings.HasPrefix(out, "404 ") {
			t.Errorf("from a sandbox's network, gateway:8088%s: %.200s", path, out)
		}
		if r := request(t, "GET", path, nil); r.Code != 404 {
			t.Errorf("from a client, %s: %d %.200s", path, r.Code, r.Body)
		}
		if out := probe(control, "http://"+manager+":9090"+path); strings.HasPrefix(out, "200 ") || strings.HasPrefix(out, "error") {
			t.Errorf("the manager's :9090%s from the control network: %.200s", path, out)
		}
	}
	for _, hdr := range [][]string{nil, {"X-Affido-Control-Key:" + strings.Repeat("0", 64)}} {
		if out := probe(control, "http://"+caddy+":8081/_profile/cpu?seconds=1", hdr...); !strings.HasPrefix(out, "401 ") {
			t.Errorf("Caddy's control listener with %q: %.200s", hdr, out)
		}
	}

	// What may read them does.
	key := ""
	for _, kv := range strings.Split(docker(t, "inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}", caddyName()), "\n") {
		if v, ok := strings.CutPrefix(kv, "AFFIDO_CONTROL_KEY="); ok {
			key = v
		}
	}
	if out := probe(control, "http://"+caddy+":8081/_profile/allocs?seconds=1", "X-Affido-Control-Key:"+key); !strings.HasPrefix(out, "200 ") {
		t.Errorf("Caddy's profile with the manager's key: %.200s", out)
	}
	if out := docker(t, "exec", managerName(), "/bin/affido", "admin", "profile", "allocs", "--seconds", "1"); len(out) == 0 {
		t.Error("the manager's profile on its admin socket is empty")
	}
}
