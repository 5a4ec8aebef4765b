//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The owner's take-over of the agent's browser, on a phone: the agent
// meets a sign-in and asks; the owner opens the live view from the
// approval card (390 px), taps the test site's fields on the picture,
// types the name and the password there, signs in and hands the tab
// back; the agent's next read sees the signed-in page, and still does
// after its browser sandbox is killed (the profile keeps the sign-in).
// The password reaches neither the agent's store nor the activity.
func TestWebBrowserTakeOver(t *testing.T) {
	startSink(t)
	user, password, tok := webUser(t, "takeover")
	sinkIP := env("AFFIDO_E2E_SINK_IP", "10.212.1.50")
	site := "http://" + sinkIP + ":9999/site"
	const secret = "s3cret-of-the-owner"
	defer func() {
		if t.Failed() {
			out, _ := dockerTry("logs", "--tail", "80", managerName())
			t.Logf("manager log:\n%s", tailMatching(out, "browser", 40))
		}
	}()

	mustPost(t, user, tok, "/rules", fmt.Sprintf(`{"tool":"browser_open","effect":"allow","when":{"host":%q}}`, sinkIP), 201)
	if r := prompt(t, user, tok, map[string]any{"text": "browse " + site + "/login"}); r.Status != "done" || !strings.Contains(r.Reply, "status 200") {
		t.Fatalf("open the sign-in page: %+v", r)
	}
	s := browserPrompt(t, user, tok, "take_over", map[string]any{"url": site + "/login", "reason": "please sign in as owner"})
	if s.Status != "waiting" || s.WaitingFor == nil || s.WaitingFor.Tool != "browser_take_over" || !strings.Contains(s.WaitingFor.Reason, "take over") {
		t.Fatalf("the take-over: %+v", s)
	}

	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)
	run(t, ctx, "a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	run(t, ctx, "the approvals page", chromedp.Navigate(baseURL+"/app/#/approvals"))
	// Clicked in the page: the list is drawn again whenever the approvals
	// are read again, so a node found a moment before may be gone.
	until(t, ctx, "the take-over's card links the live view; open it", `(a => a ? (a.click(), true) : false)(document.querySelector('#approval-list li.approval a[data-live-view]'))`)
	until(t, ctx, "the agent's tab, live, with what it asks", fmt.Sprintf(`location.hash.startsWith('#/browser/') && document.querySelector('#screen').naturalWidth > 0 &&
  document.querySelector('#screen-host').textContent.includes(%q) && document.querySelector('#screen-path').textContent.includes('/site/login') &&
  !document.querySelector('#takeover-ask').hidden && document.querySelector('#takeover-ask').textContent.includes('please sign in as owner') &&
  !document.querySelector('#hand-back').hidden`, sinkIP))
	run(t, ctx, "scroll to the hand-back", chromedp.ScrollIntoView(chromedp.ID("hand-back")))
	until(t, ctx, "the hand-back within reach at 390 px", reachable("#hand-back"))
	// The picture is sized to the phone: its pixels are the page's width
	// at the screen's pixel ratio, not the desktop tab's 1280.
	if w := evalString(t, ctx, `String(document.querySelector('#screen').naturalWidth)`); w == "1280" {
		t.Fatalf("the live view was not sized to the phone: %s px wide", w)
	}
	screenshots(t, ctx, "browser-takeover")
	run(t, ctx, "a phone again", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))

	// tap taps the picture at fractions of its size, then waits for a
	// fresh picture (the state line says Live again).
	tap := func(what string, fx, fy float64) {
		t.Helper()
		until(t, ctx, "the picture in view before tapping "+what, `(document.querySelector('#screen').scrollIntoView({block: 'start'}), document.querySelector('#screen-state').textContent.startsWith('Live'))`)
		at := evalString(t, ctx, fmt.Sprintf(`(() => { const r = document.querySelector('#screen').getBoundingClientRect(); return (r.left + r.width * %g) + ',' + (r.top + r.height * %g); })()`, fx, fy))
		var x, y float64
		if _, err := fmt.Sscanf(at, "%g,%g", &x, &y); err != nil {
			t.Fatalf("where to tap %s: %q", what, at)
		}
		run(t, ctx, "tap "+what, chromedp.MouseClickXY(x, y))
	}
	typeText := func(text string) {
		t.Helper()
		run(t, ctx, "type on the live view", chromedp.SetValue(chromedp.ID("screen-text"), text), chromedp.Click(chromedp.CSS(`#screen-type button`)))
		until(t, ctx, "the text sent", `document.querySelector('#screen-text').value === '' && document.querySelector('#screen-state').textContent.startsWith('Live')`)
	}
	tap("the name field", 0.5, 0.15)
	typeText("owner")
	tap("the password field", 0.5, 0.40)
	typeText(secret)
	tap("the sign-in button", 0.5, 0.65)
	until(t, ctx, "the signed-in page on the live view", `document.querySelector('#screen-path').textContent.includes('/site/account')`)

	run(t, ctx, "hand the tab back", chromedp.Click(chromedp.ID("hand-back")))
	until(t, ctx, "back in the conversation", `location.hash.startsWith('#/chat/')`)
	waitUntil(t, 60*time.Second, "the take-over's call to run", func() bool {
		for _, e := range inspectOf(t, user, tok).Entries.Items {
			if e.Kind == "tool_result" && strings.Contains(e.Text, "handed the tab back") {
				return true
			}
		}
		return false
	})

	// signedIn reads the page; the read's outside text is the signed-in
	// page (one more such entry than before).
	reads := func() (n int) {
		for _, e := range inspectOf(t, user, tok).Entries.Items {
			if e.Kind == "outside_text" && strings.Contains(e.Text, "Signed in as owner") {
				n++
			}
		}
		return n
	}
	signedIn := func(when string) {
		t.Helper()
		before := reads()
		if r := browserPrompt(t, user, tok, "read", nil); r.Status != "done" || !strings.Contains(r.Reply, "outside text") {
			t.Fatalf("read %s: %+v", when, r)
		}
		if reads() != before+1 {
			t.Fatalf("the agent's read %s is not the signed-in page", when)
		}
	}
	signedIn("after the hand-back")

	// The sandbox killed: the next read starts it again, the tab reopens
	// at its page, the profile's cookie still signs it in.
	docker(t, "kill", stack+"-"+user+"-browser")
	signedIn("after the browser sandbox was killed")

	// The owner's password is the page's: not in the agent's store, not
	// in the activity (which records the owner's inputs, not their text).
	if b := mustGet(t, user, tok, "/inspect?limit=500").Body; strings.Contains(b, secret) {
		t.Fatal("the owner's password reached the agent's store")
	}
	code, body := owner(t, tok, "GET", "/api/activity", "")
	if code != 200 || strings.Contains(body, secret) || !strings.Contains(body, "browser.owner_input") || !strings.Contains(body, "browser.action") {
		t.Fatalf("the activity: %d %.400s", code, body)
	}
}
