//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The web client in a real browser (Debian's chromium, headless, driven by
// chromedp) against the real stack. Screenshots of each page at a phone and
// a desktop width go to .build/screenshots/.

// browser starts a headless Chromium. A test that uses one stays serial
// (no t.Parallel) and is named TestWeb…, which run.sh runs alone: Chromium
// aborts its requests (net::ERR_NETWORK_CHANGED) whenever another test's
// new sandbox adds a network interface on the host.
func browser(t *testing.T) (context.Context, func()) {
	t.Helper()
	mustRunAlone(t, "Chromium aborts its requests when another test's sandbox network appears")
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/prereqs.sh install adds it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), // as root chromedp adds --no-sandbox itself
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 800),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	// The first run starts the browser; it must have no deadline of its own.
	enable := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, cdplog.Enable, cdp.Empty{})
		return err
	})
	if err := chromedp.Do(ctx, enable); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// The page's own errors and console, and every request it made that
	// did not end well or never ended, for a failing test's log.
	var mu sync.Mutex
	var pageLog []string
	requests := map[network.RequestID]string{} // sent, not yet finished
	_ = chromedp.Listen(ctx, func(ev any) {
		var line string
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			mu.Lock()
			requests[ev.RequestID] = time.Now().Format("15:04:05.000") + " " + ev.Request.Method + " " + ev.Request.URL
			mu.Unlock()
			return
		case *network.EventResponseReceived:
			if ev.Response.Status < 400 {
				return
			}
			line = fmt.Sprintf("response %d %s", int(ev.Response.Status), ev.Response.URL)
		case *network.EventLoadingFinished:
			mu.Lock()
			delete(requests, ev.RequestID)
			mu.Unlock()
			return
		case *network.EventLoadingFailed:
			mu.Lock()
			line = fmt.Sprintf("request failed (%s): %s", ev.ErrorText, requests[ev.RequestID])
			delete(requests, ev.RequestID)
			mu.Unlock()
		case *runtime.EventExceptionThrown:
			line = fmt.Sprintf("exception: %s %s:%d", ev.ExceptionDetails.Text, ev.ExceptionDetails.URL, ev.ExceptionDetails.LineNumber)
			if ev.ExceptionDetails.Exception != nil {
				line += " " + ev.ExceptionDetails.Exception.Description
			}
		case *cdplog.EventEntryAdded: // the browser's own messages (a module that failed to load)
			line = fmt.Sprintf("log.%s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
		case *runtime.EventConsoleAPICalled:
			line = "console." + string(ev.Type) + ":"
			for _, a := range ev.Args {
				line += " " + string(a.Value) + a.Description
			}
		default:
			return
		}
		mu.Lock()
		pageLog = append(pageLog, line)
		mu.Unlock()
	})
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("the page's console and errors:\n%s", strings.Join(pageLog, "\n"))
			var open []string
			for _, r := range requests {
				open = append(open, r)
			}
			t.Logf("the page's requests still open (an event stream is one):\n%s", strings.Join(open, "\n"))
			mu.Unlock()
		}
	})
	return ctx, func() { cancelC(); cancelA() }
}

// run runs browser steps within two minutes, failing the test with what
// was being done.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// until polls a JavaScript condition in the page until it holds, for 90 s.
// A poll that a navigation interrupts (a sign-in, a reload) starts again.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := chromedp.Run(tctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			page, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText.slice(0, 1500)`))
			cancel()
			t.Fatalf("%s: not within 90 s: %v\nthe page: %s", what, err, page)
		}
	}
}

// count evaluates a JavaScript number in the page.
func count(t *testing.T, ctx context.Context, expr string) int {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := chromedp.Run(tctx, chromedp.Evaluate[int](expr))
	if err != nil {
		t.Fatalf("count %s: %v", expr, err)
	}
	return n
}

// evalString evaluates a JavaScript string in the page.
func evalString(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(tctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluate %.60s: %v", expr, err)
	}
	return s
}

// cardsWith is the number of timeline cards whose text contains s.
func cardsWith(s string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#timeline > li')].filter(li => li.textContent.includes(%q)).length`, s)
}

// ownerCardsWith is the number of the owner's messages containing s.
func ownerCardsWith(s string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#timeline > li.owner')].filter(li => li.textContent.includes(%q)).length`, s)
}

// screenshots writes the page at a phone and a desktop width.
func screenshots(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := filepath.Join("..", ".build", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		label string
		w, h  int64
		phone bool
	}{{"phone", 390, 844, true}, {"desktop", 1280, 800, false}} {
		emulate := chromedp.EmulateViewport(v.w, v.h)
		if v.phone {
			emulate = chromedp.EmulateViewport(v.w, v.h, chromedp.EmulateMobile)
		}
		run(t, ctx, "viewport "+v.label, emulate)
		bad := evalString(t, ctx, outside)
		if bad != "[]" {
			t.Errorf("%s at %s width: elements past the viewport: %s", name, v.label, bad)
		}
		tctx, cancel := context.WithTimeout(ctx, time.Minute)
		buf, err := chromedp.Run(tctx, chromedp.FullScreenshot(100)) // 100: PNG
		cancel()
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s.png", name, v.label)), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, ctx, "desktop again", chromedp.EmulateViewport(1280, 800))
}

// webUser makes a user with a password, as the operator would.
func webUser(t *testing.T, prefix string) (user, password, tok string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	user, password = prefix+"-"+hex.EncodeToString(b), "browser password"
	reportOnFailure(t, user)
	cmd := exec.Command("docker", "exec", "-i", managerName(), "/bin/affido", "admin", "password", user)
	cmd.Stdin = strings.NewReader(password + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("admin password: %v %s", err, out)
	}
	return user, password, token(t, user)
}

func signInInBrowser(t *testing.T, ctx context.Context, user, password string) {
	t.Helper()
	run(t, ctx, "open the client", chromedp.Navigate(baseURL+"/app/"))
	until(t, ctx, "redirected to sign-in", `location.pathname === '/app/sign-in'`)
	run(t, ctx, "sign in",
		chromedp.SendKeys(chromedp.ID("user"), user),
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.Click(chromedp.ID("submit")))
	until(t, ctx, "the conversation page, its stream live", `location.pathname === '/app/' && document.querySelector('#stream-state')?.dataset.state === 'live'`)
}

func sendInBrowser(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	run(t, ctx, "type "+text, chromedp.SendKeys(chromedp.ID("prompt"), text+"\r")) // Enter sends
}

// Sign in, talk, reload in the middle of a run, approve a call and see it
// run once, a decided card after reload, the trace; then the agent killed
// and the manager restarted with the page open.
func TestWebClientInABrowser(t *testing.T) {
	user, password, tok := webUser(t, "browser")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)

	// The reply streams in (a draft card the stored reply replaces).
	until(t, ctx, "watch for drafts", `(window.sawDraft = false, new MutationObserver((ms) => { for (const m of ms) for (const n of m.addedNodes) if (n.classList && n.classList.contains('draft')) window.sawDraft = true; }).observe(document.querySelector('#timeline'), { childList: true }), true)`)
	sendInBrowser(t, ctx, "hello browser")
	until(t, ctx, "the reply", cardsWith("echo: hello browser")+` === 1`)
	until(t, ctx, "it streamed in first, and its draft is gone", `window.sawDraft === true && document.querySelectorAll('#timeline li.draft').length === 0`)
	screenshots(t, ctx, "conversation")

	// Citations required: the reply shows its spans, verified on this read.
	if r := post(t, user, tok, "/ingest?name=pets.txt", "Cats sleep all day.\nDogs dream too, like people do.\n"); r.Code != 201 {
		t.Fatalf("ingest: %d %s", r.Code, r.Body)
	}
	run(t, ctx, "citations required", chromedp.Click(chromedp.ID("cite")))
	sendInBrowser(t, ctx, "cite dogs dream")
	until(t, ctx, "the verified citation", `[...document.querySelectorAll('#timeline details.citations summary')].some(s => s.textContent.includes('attribution verified'))`)
	run(t, ctx, "open the cited lines", chromedp.Click(chromedp.CSS(`#timeline details.citations button`)))
	until(t, ctx, "the stored lines", `[...document.querySelectorAll('#timeline details.citations pre')].some(p => !p.hidden && p.textContent.includes('Dogs dream too'))`)
	screenshots(t, ctx, "citations")
	run(t, ctx, "citations off", chromedp.Click(chromedp.ID("cite")))

	// A reload while the model is still answering: the reply arrives once.
	sendInBrowser(t, ctx, "slow 3000: slow one")
	until(t, ctx, "the prompt is stored", ownerCardsWith("slow 3000: slow one")+` === 1`)
	run(t, ctx, "reload", chromedp.Reload())
	until(t, ctx, "the reply after the reload", cardsWith("echo: slow 3000: slow one")+` === 1`)
	if n := count(t, ctx, ownerCardsWith("slow 3000: slow one")); n != 1 {
		t.Fatalf("the prompt shows %d times after the reload", n)
	}

	// An approval: nothing is focused on it, so Enter cannot approve; allow once.
	sendInBrowser(t, ctx, "run: echo ran >> browser.txt")
	until(t, ctx, "the approval card", `document.querySelector('#timeline li.approval button[data-decision="allow_once"]') !== null`)
	if n := count(t, ctx, `document.activeElement && document.activeElement.closest('li.approval') ? 1 : 0`); n != 0 {
		t.Fatal("an approval button has the focus")
	}
	screenshots(t, ctx, "approval")
	until(t, ctx, "allow always offered with its rule", `document.querySelector('#timeline li.approval button[data-decision="allow_always"]')?.textContent.includes('when the command is')`)
	// The sticky prompt may cover the card's last line: bring it to the middle first.
	until(t, ctx, "the card in view", `(document.querySelector('#timeline li.approval').scrollIntoView({block: 'center'}), true)`)
	run(t, ctx, "allow once", chromedp.Click(chromedp.CSS(`#timeline li.approval button[data-decision="allow_once"]`)))
	until(t, ctx, "the command's result", `[...document.querySelectorAll('#timeline details.tool pre.result')].some(p => p.textContent.includes('exit 0'))`)
	if f := mustGet(t, user, tok, "/file?path=browser.txt").Body; f != "ran\n" {
		t.Fatalf("browser.txt %q: the command must run exactly once", f)
	}
	run(t, ctx, "reload", chromedp.Reload())
	until(t, ctx, "the decided card after reload", `[...document.querySelectorAll('#timeline li.approval.decided')].some(li => li.textContent.includes('decided: allow_once')) && document.querySelectorAll('#timeline li.approval button').length === 0`)

	run(t, ctx, "the trace", chromedp.Navigate(baseURL+"/app/#/trace"))
	until(t, ctx, "trace entries", `document.querySelectorAll('#trace li').length >= 8 && document.querySelectorAll('#usage tr').length >= 1`)
	// A tree of runs, each model call with its tokens, duration and cost.
	until(t, ctx, "runs with their model calls", `document.querySelectorAll('#trace > li.run').length >= 3 && [...document.querySelectorAll('#trace li.model-call')].some(li => /in · \d+ out tokens · \d+ ms · \$\d/.test(li.textContent))`)
	screenshots(t, ctx, "trace")
	run(t, ctx, "the approvals page", chromedp.Navigate(baseURL+"/app/#/approvals"))
	until(t, ctx, "nothing waits", `document.querySelector('#approval-list').textContent.includes('Nothing waits')`)
	screenshots(t, ctx, "approvals")

	// The agent killed under the open page: the stream reconnects by
	// itself, and what happened meanwhile shows without a reload.
	run(t, ctx, "back to the conversation", chromedp.Navigate(baseURL+"/app/#/chat"))
	until(t, ctx, "live", `document.querySelector('#stream-state').dataset.state === 'live'`)
	docker(t, "kill", "-s", "KILL", stack+"-"+user+"-agent")
	until(t, ctx, "the page says it reconnects", `document.querySelector('#stream-state').dataset.state !== 'live'`)
	// The sandbox is starting again: 503 sandbox-starting says to ask again
	// after Retry-After, as a client does, until it takes the prompt.
	waitUntil(t, 90*time.Second, "the prompt taken while the agent restarts", func() bool {
		r := post(t, user, tok, "/prompt", `{"text":"sent from curl while the page reconnects"}`)
		if r.Code == 503 && strings.Contains(r.Body, "sandbox-starting") {
			return false
		}
		if r.Code != 200 && r.Code != 202 {
			t.Fatalf("prompt while the agent restarts: %d %s", r.Code, r.Body)
		}
		return true
	})
	until(t, ctx, "the curl prompt's reply on the page", cardsWith("echo: sent from curl while the page reconnects")+` === 1`)
	until(t, ctx, "live again", `document.querySelector('#stream-state').dataset.state === 'live'`)

	// The manager restarted with the page open: the page goes on working.
	killManager(t)
	docker(t, "start", managerName())
	waitManagerHealthy(t)
	sendInBrowser(t, ctx, "after the manager restart")
	until(t, ctx, "a reply after the manager restart", cardsWith("echo: after the manager restart")+` === 1`)
	if n := count(t, ctx, cardsWith("echo: hello browser")); n != 1 {
		t.Fatalf("the first reply shows %d times", n)
	}
}

// The sign-in page refuses a wrong password and says so.
func TestWebSignInRefusedInABrowser(t *testing.T) {
	user, _, _ := webUser(t, "browser-bad")
	ctx, done := browser(t)
	defer done()
	run(t, ctx, "open sign-in", chromedp.Navigate(baseURL+"/app/sign-in"),
		chromedp.SendKeys(chromedp.ID("user"), user),
		chromedp.SendKeys(chromedp.ID("password"), "not the password"),
		chromedp.Click(chromedp.ID("submit")))
	until(t, ctx, "the error", `document.querySelector('#error').textContent.includes('wrong')`)
	screenshots(t, ctx, "sign-in")
	if n := count(t, ctx, `location.pathname === '/app/sign-in' ? 1 : 0`); n != 1 {
		t.Fatal("a wrong password left the sign-in page")
	}
}

// The other pages in the browser: upload a file and see it listed, ingest
// and delete it; install a skill from the marketplace; a reminder listed
// and cancelled; settings (a notification URL refused, a rule added, the
// sandbox's state); the activity timeline.
func TestWebClientPagesInABrowser(t *testing.T) {
	user, password, tok := webUser(t, "pages")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)

	file := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(file, []byte("Plants need water.\nCats sleep.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "files", chromedp.Navigate(baseURL+"/app/#/files"))
	until(t, ctx, "the files page", `!document.querySelector('#page-files').hidden`)
	run(t, ctx, "upload", chromedp.SetUploadFiles(chromedp.CSS("#upload"), []string{file}))
	until(t, ctx, "the upload listed", `document.querySelector('#file-list tr[data-path="uploads/notes.txt"]') !== null`)
	if got := mustGet(t, user, tok, "/uploads/notes.txt").Body; got != "Plants need water.\nCats sleep.\n" {
		t.Fatalf("uploaded bytes %q", got)
	}
	run(t, ctx, "ingest", chromedp.Click(chromedp.CSS(`#file-list tr[data-path="uploads/notes.txt"] button[data-action="ingest"]`)))
	until(t, ctx, "ingested", `document.querySelector('#status-line').textContent.includes('ingested')`)
	if r := request(t, "GET", "/u/"+user+"/raw?doc=notes.txt", bearer(tok)); r.Code != 200 || !strings.Contains(r.Body, "Plants") {
		t.Fatalf("the ingested document: %d %q", r.Code, r.Body)
	}
	screenshots(t, ctx, "files")
	del := chromedp.CSS(`#file-list tr[data-path="uploads/notes.txt"] button[data-action="delete"]`)
	run(t, ctx, "delete, twice", chromedp.Click(del), chromedp.Click(del))
	until(t, ctx, "deleted", `document.querySelector('#file-list tr[data-path="uploads/notes.txt"]') === null`)

	run(t, ctx, "skills", chromedp.Navigate(baseURL+"/app/#/skills"))
	until(t, ctx, "the marketplace", `document.querySelector('#market-skills li[data-market="csv-summary"] button') !== null`)
	run(t, ctx, "install", chromedp.Click(chromedp.CSS(`#market-skills li[data-market="csv-summary"] button`)))
	until(t, ctx, "installed and checked", `document.querySelector('#installed-skills li[data-skill="csv-summary"]')?.textContent.includes('matches its record')`)
	screenshots(t, ctx, "skills")

	grant(t, user, tok, "set_reminder")
	prompt(t, user, tok, map[string]any{"text": "remind in 1h: water the plants"})
	run(t, ctx, "reminders", chromedp.Navigate(baseURL+"/app/#/reminders"))
	until(t, ctx, "the reminder", `document.querySelector('#reminder-list').textContent.includes('water the plants')`)
	screenshots(t, ctx, "reminders")
	run(t, ctx, "cancel it", chromedp.Click(chromedp.CSS(`#reminder-list button`)))
	until(t, ctx, "no reminders, the cancelled one in the history", `document.querySelector('#reminder-list').textContent.includes('No reminders') && document.querySelector('#reminder-history li[data-ended="cancelled"]')?.textContent.includes('water the plants')`)

	// A second agent through the picker: its own conversation and jobs,
	// none of them main's.
	mustPost(t, user, tok, "/agents", `{"name":"helper"}`, 201)
	run(t, ctx, "load the client again", chromedp.Navigate(baseURL+"/app/?agent=main#/chat")) // a new search: a full load
	until(t, ctx, "the picker lists helper", `(() => { const o = [...document.querySelectorAll('#agent-pick option')].map(o => o.value); return o.includes('main') && o.includes('helper') && document.querySelector('#agent-pick').value === 'main'; })()`)
	run(t, ctx, "pick helper", chromedp.SetValue(chromedp.ID("agent-pick"), "helper")) // fires change, as a person's choice does
	until(t, ctx, "the client for helper, its stream live", `location.search === '?agent=helper' && document.querySelector('#agent-pick').value === 'helper' && document.querySelector('#stream-state')?.dataset.state === 'live'`)
	sendInBrowser(t, ctx, "hello helper")
	until(t, ctx, "helper's reply", cardsWith("echo: hello helper")+` >= 1`)
	helperSaw, mainSaw := mustGet(t, user, tok, "/agents/helper/inspect?limit=1000").Body, mustGet(t, user, tok, "/inspect?limit=1000").Body
	if !strings.Contains(helperSaw, "hello helper") || strings.Contains(mainSaw, "hello helper") {
		t.Fatalf("the message typed for helper: in helper's conversation %v, in main's %v", strings.Contains(helperSaw, "hello helper"), strings.Contains(mainSaw, "hello helper"))
	}
	run(t, ctx, "helper's jobs", chromedp.Navigate(baseURL+"/app/?agent=helper#/reminders"))
	until(t, ctx, "no jobs yet", `document.querySelector('#job-list').textContent.includes('No scheduled jobs')`)
	run(t, ctx, "schedule a job", chromedp.SetValue(chromedp.ID("job-cron"), "0 8 * * 1-5"), chromedp.SetValue(chromedp.ID("job-tz"), "Europe/Paris"),
		chromedp.SetValue(chromedp.ID("job-prompt"), "summarise the news"), chromedp.SetValue(chromedp.ID("job-name"), "morning"),
		chromedp.Click(chromedp.CSS(`#job-form button`)))
	until(t, ctx, "the job listed", `document.querySelector('#job-list li[data-state="scheduled"]')?.textContent.includes('morning: 0 8 * * 1-5 (Europe/Paris)')`)
	jobsOf := func(route string) []map[string]any {
		var v struct {
			Jobs []map[string]any `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(mustGet(t, user, tok, route).Body), &v); err != nil {
			t.Fatal(err)
		}
		return v.Jobs
	}
	if h, m := jobsOf("/agents/helper/jobs"), jobsOf("/jobs"); len(h) != 1 || h[0]["prompt"] != "summarise the news" || len(m) != 0 {
		t.Fatalf("jobs after the form: helper %v, main %v", h, m)
	}
	screenshots(t, ctx, "jobs")
	run(t, ctx, "pause it", chromedp.Click(chromedp.CSS(`#job-list button[data-action="pause"]`)))
	until(t, ctx, "paused", `document.querySelector('#job-list li[data-state="paused"]') !== null`)
	if h := jobsOf("/agents/helper/jobs"); len(h) != 1 || h[0]["state"] != "paused" {
		t.Fatalf("helper's jobs after pause: %v", h)
	}
	run(t, ctx, "a bad cron", chromedp.SetValue(chromedp.ID("job-cron"), "every morning"), chromedp.SetValue(chromedp.ID("job-prompt"), "x"),
		chromedp.Click(chromedp.CSS(`#job-form button`)))
	until(t, ctx, "refused", `document.querySelector('#status-line').textContent.includes('error')`)
	run(t, ctx, "delete it", chromedp.Click(chromedp.CSS(`#job-list button[data-action="delete"]`)))
	until(t, ctx, "no jobs again", `document.querySelector('#job-list').textContent.includes('No scheduled jobs')`)
	if h := jobsOf("/agents/helper/jobs"); len(h) != 0 {
		t.Fatalf("helper's jobs after delete: %v", h)
	}

	run(t, ctx, "settings", chromedp.Navigate(baseURL+"/app/#/settings"))
	// The test stack pauses a sandbox after 3 s without an activating
	// request, so the page may find it running or already paused.
	until(t, ctx, "the sandbox state", `/state: (running|paused)/.test(document.querySelector('#sandbox-state').textContent)`)
	if n := count(t, ctx, `[...document.querySelectorAll('section.page')].filter(p => p.offsetParent !== null).length`); n != 1 {
		t.Fatalf("%d pages show at once", n)
	}
	run(t, ctx, "an inward notification URL", chromedp.SetValue(chromedp.ID("notify-url"), "http://127.0.0.1:9090/healthz"), chromedp.Click(chromedp.CSS(`#notify-form button`)))
	until(t, ctx, "refused", `document.querySelector('#status-line').textContent.includes('error')`)
	// A condition without a value is refused in the page, and an allow of
	// every shell call waits for a second yes; neither sends anything.
	run(t, ctx, "an empty condition", chromedp.SetValue(chromedp.ID("rule-tool"), "shell"), chromedp.SetValue(chromedp.ID("rule-cond"), "command_prefix"),
		chromedp.SetValue(chromedp.ID("rule-value"), " "), chromedp.Click(chromedp.CSS(`#rule-form button`)))
	until(t, ctx, "refused next to the field", `document.querySelector('#rule-error').textContent.includes('Give the condition a value')`)
	run(t, ctx, "every shell call", chromedp.SetValue(chromedp.ID("rule-cond"), ""), chromedp.Click(chromedp.CSS(`#rule-form button`)))
	until(t, ctx, "a confirm step", `!document.querySelector('#rule-confirm').hidden && document.querySelector('#rule-confirm-text').textContent.includes('every shell call')`)
	run(t, ctx, "cancel it", chromedp.Click(chromedp.ID("rule-confirm-no")))
	until(t, ctx, "the confirm step gone", `document.querySelector('#rule-confirm').hidden`)
	if b := mustGet(t, user, tok, "/rules").Body; strings.Contains(b, `"tool":"shell"`) {
		t.Fatalf("a shell rule was sent: %s", b)
	}
	run(t, ctx, "a rule", chromedp.SetValue(chromedp.ID("rule-tool"), "shell"), chromedp.SetValue(chromedp.ID("rule-cond"), "command_prefix"),
		chromedp.SetValue(chromedp.ID("rule-value"), "ls "), chromedp.Click(chromedp.CSS(`#rule-form button`)))
	until(t, ctx, "the rule listed in words", `document.querySelector('#rule-list').textContent.includes('Allow shell only when the command starts with "ls "')`)
	screenshots(t, ctx, "settings")
	if r := prompt(t, user, tok, map[string]any{"text": "run: ls -a"}); r.Status != "done" {
		t.Fatalf("the rule added in the browser does not allow: %+v", r)
	}

	run(t, ctx, "activity", chromedp.Navigate(baseURL+"/app/#/activity"))
	until(t, ctx, "the sandbox's life and the agent's work", `(() => { const t = document.querySelector('#activity-list').textContent; return t.includes('sandbox created') || t.includes('sandbox started'); })() && document.querySelector('#activity-list li[data-source="agent"]') !== null`)
	screenshots(t, ctx, "activity")
}
