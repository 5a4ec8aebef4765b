//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// The web client as a phone shows it: the layout holds at 320, 390, 1280
// and 1440 px with 1, 3 and 20 conversations and a 200-character unbroken
// title; replies render as markdown with nothing of the model's running;
// an approval raised by another agent reaches the page without a reload;
// a conversation has an address that Back returns to.

// outside lists the elements whose box reaches past the viewport's sides.
// Every rendered element is checked, not the document's scroll width (a
// page that clips would read 0 there). An element may only reach past
// the viewport inside a box that scrolls it (overflow-x auto or scroll);
// a box that clips (hidden) excuses nothing.
const outside = `(() => {
  const W = document.documentElement.clientWidth, bad = [];
  for (const e of document.querySelectorAll('body *')) {
    const cs = getComputedStyle(e);
    if (cs.display === 'none' || cs.visibility === 'hidden') continue;
    const r = e.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.left >= -1 && r.right <= W + 1) continue;
    let scrolled = false;
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if (ox === 'auto' || ox === 'scroll') { scrolled = true; break; }
    }
    if (!scrolled) bad.push(e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + [...e.classList].join('.') + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
  }
  return JSON.stringify(bad.slice(0, 10));
})()`

// reachable says whether an element is on screen and is what a tap at its
// middle would hit (not under another element).
func reachable(sel string) string {
	return fmt.Sprintf(`(() => {
  const e = document.querySelector(%q);
  if (!e) return false;
  const r = e.getBoundingClientRect();
  if (r.top < 0 || r.left < 0 || r.bottom > innerHeight + 1 || r.right > innerWidth + 1 || r.width === 0) return false;
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return hit === e || e.contains(hit);
})()`, sel)
}

func TestWebLayoutHoldsAtEveryWidth(t *testing.T) {
	user, password, tok := webUser(t, "layout")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)
	// A conversation long enough to scroll, with a wide code block, a
	// table and an unbroken word.
	long := "see https://example.com/" + strings.Repeat("a", 300) + "\n\n```\n" + strings.Repeat("wide code ", 60) + "\n```\n\n| a | b | c |\n|---|---|---|\n| " + strings.Repeat("cell ", 40) + " | 2 | 3 |\n"
	for i := 0; i < 8; i++ {
		prompt(t, user, tok, map[string]any{"text": fmt.Sprintf("message %d: %s", i, long)})
	}
	var current struct {
		Current int64 `json:"current"`
	}
	if err := json.Unmarshal([]byte(mustGet(t, user, tok, "/sessions").Body), &current); err != nil || current.Current == 0 {
		t.Fatalf("sessions: %v", err)
	}
	chat := fmt.Sprintf("%s/app/#/chat/%d", baseURL, current.Current)
	title200 := strings.Repeat("W", 200)
	check := func(label string, conversations int) {
		t.Helper()
		for _, v := range []struct {
			name  string
			w, h  int64
			phone bool
		}{{"phone", 390, 844, true}, {"small phone", 320, 640, true}, {"desktop", 1280, 800, false}, {"wide", 1440, 900, false}} {
			emulate := chromedp.EmulateViewport(v.w, v.h)
			if v.phone {
				emulate = chromedp.EmulateViewport(v.w, v.h, chromedp.EmulateMobile)
			}
			// A full load (the address alone may only change the hash).
			run(t, ctx, "viewport "+v.name, emulate, chromedp.Navigate(chat), chromedp.Reload())
			until(t, ctx, "the conversation, rendered, with every conversation listed", fmt.Sprintf(`document.querySelectorAll('#timeline li.assistant .md').length >= 8 && document.querySelectorAll('#conversation-list li a').length === %d`, conversations))
			bad := evalString(t, ctx, outside)
			if bad != "[]" {
				t.Errorf("%s at %s: elements past the viewport: %s", label, v.name, bad)
			}
			for _, sel := range []string{"#prompt", "#send", "header.top"} {
				until(t, ctx, fmt.Sprintf("%s at %s: %s on screen and tappable", label, v.name, sel), reachable(sel))
			}
			// Scrolled to the oldest entry: the header and the composer stay.
			until(t, ctx, "scrolled to the top", `(document.querySelector('#timeline').scrollTop = 0, document.querySelector('#timeline').scrollTop === 0)`)
			for _, sel := range []string{"header.top", "#send"} {
				until(t, ctx, fmt.Sprintf("%s at %s, scrolled up: %s still there", label, v.name, sel), reachable(sel))
			}
			if v.phone {
				// The rail is a drawer: closed it is hidden, open it lists the conversations.
				until(t, ctx, "the drawer closed", `getComputedStyle(document.querySelector('#rail')).visibility === 'hidden'`)
				run(t, ctx, "open the drawer", chromedp.Click(chromedp.ID("menu")))
				until(t, ctx, "the drawer open (its slide in over), its list on screen", `getComputedStyle(document.querySelector('#rail')).transform === 'none' && `+reachable("#conversation-list li a"))
				bad = evalString(t, ctx, outside)
				if bad != "[]" {
					t.Errorf("%s, drawer open: elements past the viewport: %s", label, bad)
				}
				screenshots(t, ctx, "layout-"+label) // ends at the desktop width
				run(t, ctx, "the phone again", emulate)
				run(t, ctx, "close it", chromedp.Click(chromedp.ID("rail-close")))
				until(t, ctx, "the drawer closed again", `getComputedStyle(document.querySelector('#rail')).visibility === 'hidden'`)
			}
		}
	}
	check("1-conversation", 1)
	for i := 0; i < 2; i++ {
		mustPost(t, user, tok, "/session/new", fmt.Sprintf(`{"title":"errand %d"}`, i), 200)
	}
	check("3-conversations", 3)
	longTitle := mustPost(t, user, tok, "/session/new", fmt.Sprintf(`{"title":%q}`, title200), 200)
	for i := 0; i < 16; i++ {
		mustPost(t, user, tok, "/session/new", fmt.Sprintf(`{"title":"more errands %d"}`, i), 200)
	}
	check("20-conversations", 20)
	// The conversation with the 200-character unbroken title, open at a
	// phone's width: the header cuts the title, nothing reaches past.
	run(t, ctx, "the long title at a phone's width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(fmt.Sprintf("%s/app/#/chat/%d", baseURL, int64(longTitle["conversation_id"].(float64)))), chromedp.Reload())
	until(t, ctx, "its title in the header", `document.querySelector('#where-title').textContent.startsWith('WWWW')`)
	if bad := evalString(t, ctx, outside); bad != "[]" {
		t.Errorf("the long title at a phone's width: elements past the viewport: %s", bad)
	}
	for _, sel := range []string{"#prompt", "#send", "header.top"} {
		until(t, ctx, "long title: "+sel+" on screen and tappable", reachable(sel))
	}
	screenshots(t, ctx, "long-title")
	// Every page at both widths, with the long title in the rail.
	for _, page := range []string{"approvals", "reminders", "files", "skills", "trace", "activity", "settings"} {
		run(t, ctx, page, chromedp.Navigate(baseURL+"/app/#/"+page))
		until(t, ctx, page+" shown", fmt.Sprintf(`!document.querySelector('#page-%s').hidden`, page))
		bad := evalString(t, ctx, outside)
		if bad != "[]" {
			t.Errorf("page %s at desktop width: elements past the viewport: %s", page, bad)
		}
		screenshots(t, ctx, "page-"+page)
	}
}

// A reply is markdown rendered on the manager: emphasis, code with its
// language and a copy button, links that open elsewhere; the model's HTML
// (a script, an image with onerror, a javascript: link) is inert text.
func TestWebRepliesAreMarkdownAndInert(t *testing.T) {
	user, password, _ := webUser(t, "markdown")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)
	until(t, ctx, "a trap for anything that runs", `(window.pwned = 0, true)`)
	text := "**bold move** and `inline` <script>window.pwned = 1</script> <img src=x onerror=\"window.pwned = 2\"> [click](javascript:window.pwned=3) https://example.org/docs\n\n```go\nfmt.Println(\"hi\")\n```"
	// The echo model replies with what it is sent (its newlines set as the
	// box's value: typed, Enter would send).
	run(t, ctx, "send markdown", chromedp.SetValue(chromedp.ID("prompt"), text), chromedp.Click(chromedp.ID("send")))
	until(t, ctx, "the reply rendered", `[...document.querySelectorAll('#timeline li.assistant .md strong')].some(s => s.textContent === 'bold move')`)
	checks := map[string]string{
		"no script, img or iframe from the model": `document.querySelectorAll('#timeline script, #timeline img, #timeline iframe, #timeline svg').length === 0`,
		"nothing ran":                                           `window.pwned === 0`,
		"no javascript: link":                                   `[...document.querySelectorAll('#timeline a')].every(a => !/^\s*javascript:/i.test(a.getAttribute('href') || ''))`,
		"links open elsewhere, without referrer":                `[...document.querySelectorAll('#timeline .md a[href^="https://example.org"]')].every(a => a.target === '_blank' && /noopener/.test(a.rel)) && document.querySelectorAll('#timeline .md a[href^="https://example.org"]').length >= 1`,
		"the code block keeps its language, with a copy button": `document.querySelector('#timeline li.assistant .md pre code.language-go') !== null && document.querySelector('#timeline li.assistant .code-box button.copy') !== null`,
		"the script shows as text":                              `[...document.querySelectorAll('#timeline li.assistant .md')].some(m => m.textContent.includes('window.pwned = 1'))`,
	}
	for what, expr := range checks {
		until(t, ctx, what, expr)
	}
	screenshots(t, ctx, "markdown")
}

// An approval raised by a scheduled job of another agent ("ops", while
// the page shows main) shows in the count and on the Approvals page
// without a reload, and is decided there on its own agent.
func TestWebApprovalOfAnotherAgentArrivesLive(t *testing.T) {
	user, password, tok := webUser(t, "live")
	mustPost(t, user, tok, "/agents", `{"name":"ops"}`, 201)
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)
	run(t, ctx, "the approvals page", chromedp.Navigate(baseURL+"/app/#/approvals"))
	until(t, ctx, "nothing waits yet", `document.querySelector('#approval-list').textContent.includes('Nothing waits') && document.querySelector('#pending-pill').hidden`)
	until(t, ctx, "a marker that a reload would wipe", `(window.sameLoad = true, true)`)
	// The job fires within 30 s; its shell call asks the owner.
	job := mustPost(t, user+"/agents/ops", tok, "/jobs", `{"cron":"@every 30s","prompt":"run: echo from ops"}`, 201)
	until(t, ctx, "the count and the card, without a reload", `window.sameLoad === true && document.querySelector('#pending-pill-count').textContent === '1' && document.title.startsWith('(1)') && document.querySelector('#approval-list li.approval[data-agent="ops"]')?.textContent.includes('agent ops')`)
	screenshots(t, ctx, "approvals-live")
	// No second firing meanwhile: the job is paused before the decision.
	mustPost(t, user+"/agents/ops", tok, fmt.Sprintf("/jobs/%d/pause", int64(job["id"].(float64))), "", 200)
	run(t, ctx, "deny it on the page", chromedp.Click(chromedp.CSS(`#approval-list li.approval[data-agent="ops"] button[data-decision="deny"]`)))
	until(t, ctx, "nothing waits again", `document.querySelector('#approval-list').textContent.includes('Nothing waits') && document.querySelector('#pending-pill').hidden && document.title === 'Affido'`)
	if b := mustGet(t, user, tok, "/agents/ops/approvals").Body; strings.Contains(b, `"tool":"shell"`) {
		t.Fatalf("the approval is still pending on ops: %s", b)
	}
}

// Each conversation has an address: switching pushes it, Back returns to
// the one before, a reload stays; a new conversation is named after its
// first prompt.
func TestWebConversationAddressesAndBack(t *testing.T) {
	user, password, tok := webUser(t, "back")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)
	sendInBrowser(t, ctx, "is the homelab OK?")
	until(t, ctx, "the reply", cardsWith("echo: is the homelab OK?")+` === 1`)
	until(t, ctx, "named after its first prompt", `[...document.querySelectorAll('#conversation-list a')].some(a => a.textContent === 'is the homelab OK?') && document.querySelector('#where-title').textContent === 'is the homelab OK?'`)
	first := evalString(t, ctx, `location.hash`)
	if !strings.HasPrefix(first, "#/chat/") {
		t.Fatalf("the address of the first conversation: %q", first)
	}
	run(t, ctx, "a new conversation", chromedp.Click(chromedp.ID("new-conversation")))
	until(t, ctx, "its own address, empty", fmt.Sprintf(`location.hash.startsWith('#/chat/') && location.hash !== %q && document.querySelectorAll('#timeline li').length === 0`, first))
	second := evalString(t, ctx, `location.hash`)
	sendInBrowser(t, ctx, "water the plants")
	until(t, ctx, "its reply", cardsWith("echo: water the plants")+` === 1`)
	run(t, ctx, "back", chromedp.NavigateBack())
	until(t, ctx, "the first conversation again", fmt.Sprintf(`location.hash === %q && %s === 1 && %s === 0`, first, cardsWith("echo: is the homelab OK?"), cardsWith("echo: water the plants")))
	run(t, ctx, "forward", chromedp.NavigateForward())
	until(t, ctx, "the second again", fmt.Sprintf(`location.hash === %q && %s === 1`, second, cardsWith("echo: water the plants")))
	run(t, ctx, "reload", chromedp.Reload())
	until(t, ctx, "still the second", fmt.Sprintf(`location.hash === %q && %s === 1 && %s === 0`, second, cardsWith("echo: water the plants"), cardsWith("echo: is the homelab OK?")))
	// Search finds the words in the messages, and leads to their conversation.
	run(t, ctx, "back to the first", chromedp.NavigateBack())
	until(t, ctx, "the first again", fmt.Sprintf(`location.hash === %q`, first))
	run(t, ctx, "search", chromedp.SendKeys(chromedp.ID("conversation-search"), "plant"))
	until(t, ctx, "a message found", `[...document.querySelectorAll('#search-results a')].some(a => a.textContent.includes('water the plants'))`)
	run(t, ctx, "open it", chromedp.Click(chromedp.CSS(`#search-results a`)))
	until(t, ctx, "its conversation", fmt.Sprintf(`location.hash === %q && %s === 1`, second, cardsWith("echo: water the plants")))
	if b := mustGet(t, user, tok, "/search?q=homelab").Body; !strings.Contains(b, "is the homelab OK?") {
		t.Fatalf("search by API: %s", b)
	}
	// Delete, two presses: the conversation goes, from the list too.
	run(t, ctx, "delete, twice", chromedp.Click(chromedp.ID("delete-conversation")), chromedp.Click(chromedp.ID("delete-conversation")))
	until(t, ctx, "gone, another shown", fmt.Sprintf(`location.hash !== %q && location.hash.startsWith('#/chat/') && ![...document.querySelectorAll('#conversation-list a')].some(a => a.textContent === 'water the plants')`, second))
	if b := mustGet(t, user, tok, "/sessions").Body; strings.Contains(b, "water the plants") {
		t.Fatalf("the deleted conversation is still listed: %s", b)
	}
}

// A slow run shows a busy line and a Stop button, and a prompt sent
// meanwhile shows as queued (after a reload too); Stop ends the slow run
// durably: the conversation says "stopped by you", no reply comes, the
// agent's store has the stopped entry, and the queued prompt runs.
func TestWebStopEndsASlowRun(t *testing.T) {
	user, password, tok := webUser(t, "stop")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)
	sendInBrowser(t, ctx, "slow 60000: think for a minute")
	until(t, ctx, "busy, with Stop", `!document.querySelector('#run-state').hidden && document.querySelector('#run-state').textContent.includes('Agent is') && !document.querySelector('#stop').hidden`)
	// A prompt sent meanwhile waits its turn: shown as queued, also after a reload.
	sendInBrowser(t, ctx, "and now?")
	until(t, ctx, "queued", `[...document.querySelectorAll('#timeline li.queued')].some(li => li.textContent.includes('and now?'))`)
	screenshots(t, ctx, "busy")
	run(t, ctx, "reload", chromedp.Reload())
	until(t, ctx, "still queued after the reload, Stop offered", `[...document.querySelectorAll('#timeline li.queued')].some(li => li.textContent.includes('and now?')) && !document.querySelector('#stop').hidden`)
	run(t, ctx, "stop", chromedp.Click(chromedp.ID("stop")))
	until(t, ctx, "stopped, not busy", `[...document.querySelectorAll('#timeline li.stopped')].some(li => li.textContent.includes('stopped by you')) && document.querySelector('#stop').hidden && document.querySelector('#run-state').hidden`)
	b := mustGet(t, user, tok, "/inspect?limit=100").Body
	if !strings.Contains(b, `"kind":"stopped"`) || strings.Contains(b, "echo: slow 60000") {
		t.Fatalf("the store after Stop: %s", b)
	}
	until(t, ctx, "the queued prompt runs, no longer queued", cardsWith("echo: and now?")+` === 1 && document.querySelectorAll('#timeline li.queued').length === 0`)
}

// "Deny and make a rule" on a phone: the card shows the proposed rule for
// editing, the owner widens the exact command to a prefix, and the next
// command with that prefix is refused without asking; neither ran.
func TestWebDenyAndMakeARule(t *testing.T) {
	user, password, tok := webUser(t, "denyrule")
	ctx, done := browser(t)
	defer done()
	run(t, ctx, "a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	signInInBrowser(t, ctx, user, password)
	sendInBrowser(t, ctx, "run: touch denied-a")
	until(t, ctx, "the card offers a rule to edit", `document.querySelector('#timeline li.approval button.make-rule') !== null`)
	until(t, ctx, "the card in view", `(document.querySelector('#timeline li.approval').scrollIntoView({block: 'center'}), true)`)
	run(t, ctx, "open the rule", chromedp.Click(chromedp.CSS(`#timeline li.approval button.make-rule`)))
	until(t, ctx, "the rule's condition, filled in", `document.querySelector('#timeline .rule-edit input[data-condition]')?.value.startsWith('touch')`)
	until(t, ctx, "widened to a prefix", `(() => { const i = document.querySelector('#timeline .rule-edit input[data-condition]'); i.dataset.condition = 'command_prefix'; i.value = 'touch '; return true; })()`)
	screenshots(t, ctx, "deny-rule")
	until(t, ctx, "the save in view", `(document.querySelector('#timeline .rule-edit button').scrollIntoView({block: 'center'}), true)`)
	run(t, ctx, "deny and save", chromedp.Click(chromedp.CSS(`#timeline .rule-edit button[data-decision="deny_always"]`)))
	until(t, ctx, "the decided card", `[...document.querySelectorAll('#timeline li.approval.decided')].some(li => li.textContent.includes('decided: deny')) && document.querySelector('#timeline .rule-edit') === null`)
	if b := mustGet(t, user, tok, "/rules").Body; !strings.Contains(b, `"command_prefix":"touch "`) || !strings.Contains(b, `"effect":"deny"`) {
		t.Fatalf("the rule saved: %s", b)
	}
	if r := post(t, user, tok, "/prompt", `{"text":"run: touch denied-b"}`); r.Code != 200 || !strings.Contains(r.Body, `"status":"done"`) {
		t.Fatalf("another command with the prefix: %d %s", r.Code, r.Body)
	}
	if out := mustGet(t, user, tok, "/files").Body; strings.Contains(out, "denied-a") || strings.Contains(out, "denied-b") {
		t.Fatalf("a denied command ran: %s", out)
	}
}

// The Agents page: make an agent, rename it and set its model, its work
// notes and whether it gets the owner's notes, see today's spend; the
// builtin agents keep their names. The notes about the owner are edited
// there too, and a save over notes written meanwhile is refused, the
// owner's text kept.
func TestWebAgentsPage(t *testing.T) {
	user, password, tok := webUser(t, "agentspage")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)
	run(t, ctx, "agents", chromedp.Navigate(baseURL+"/app/#/agents"))
	until(t, ctx, "main and the worker listed, spend said", `document.querySelector('#agent-list li[data-agent="main"]') !== null && document.querySelector('#agent-list li[data-agent="worker"] input[disabled]') !== null && document.querySelector('#agents-spend').textContent.length > 0`)
	run(t, ctx, "make research", chromedp.SetValue(chromedp.ID("agent-name"), "research"), chromedp.Click(chromedp.CSS(`#agent-form button`)))
	until(t, ctx, "research listed", `document.querySelector('#agent-list li[data-agent="research"]') !== null`)
	run(t, ctx, "a bad name", chromedp.SetValue(chromedp.ID("agent-name"), "Research!"), chromedp.Click(chromedp.CSS(`#agent-form button`)))
	if n := count(t, ctx, `document.querySelectorAll('#agent-list li[data-agent]').length`); n != 3 {
		t.Fatalf("%d agents after a refused name", n)
	}
	run(t, ctx, "rename research and give it a model", chromedp.SetValue(chromedp.CSS(`#agent-list li[data-agent="research"] input[aria-label^="name"]`), "scout"),
		chromedp.SetValue(chromedp.CSS(`#agent-list li[data-agent="research"] select`), "fake/alt"),
		chromedp.SetValue(chromedp.CSS(`#agent-list li[data-agent="research"] textarea[aria-label^="instructions"]`), "You find sources. Cite them."),
		chromedp.SetValue(chromedp.CSS(`#agent-list li[data-agent="research"] textarea[aria-label^="work notes"]`), "Sources so far: none."),
		chromedp.Click(chromedp.CSS(`#agent-list li[data-agent="research"] input[type="checkbox"]`)),
		chromedp.Click(chromedp.CSS(`#agent-list li[data-agent="research"] button[type="submit"]`)))
	until(t, ctx, "scout listed", `document.querySelector('#agent-list li[data-agent="scout"]') !== null && document.querySelector('#agent-list li[data-agent="research"]') === null`)
	b := mustGet(t, user, tok, "/agents/scout").Body
	if !strings.Contains(b, `"model":"fake/alt"`) || !strings.Contains(b, `"instructions":"You find sources. Cite them."`) || !strings.Contains(b, `"owner_notes":false`) {
		t.Fatalf("scout after the form: %s", b)
	}
	if b := mustGet(t, user, tok, "/agents/scout/notes").Body; !strings.Contains(b, `"text":"Sources so far: none."`) {
		t.Fatalf("scout's work notes after the form: %s", b)
	}
	// The notes about the owner: saved from the page, shown with their version.
	run(t, ctx, "the owner's notes", chromedp.SetValue(chromedp.ID("owner-notes"), "Ada. Short answers, please."),
		chromedp.Click(chromedp.CSS(`#owner-notes-form button[type="submit"]`)))
	until(t, ctx, "the owner's notes saved", `document.querySelector('#owner-notes-state').textContent.startsWith('Version 1')`)
	if b := mustGet(t, user, tok, "/notes").Body; !strings.Contains(b, `"text":"Ada. Short answers, please."`) {
		t.Fatalf("the owner's notes after the form: %s", b)
	}
	// Written meanwhile by someone else: the page says so and keeps the owner's text.
	if r := put(t, user, tok, "/notes", `{"text":"Ada.","version":1}`); r.Code != 200 {
		t.Fatalf("PUT /notes: %d %s", r.Code, r.Body)
	}
	run(t, ctx, "a stale save", chromedp.SetValue(chromedp.ID("owner-notes"), "Ada, in Lisbon."),
		chromedp.Click(chromedp.CSS(`#owner-notes-form button[type="submit"]`)))
	until(t, ctx, "the conflict said", `document.querySelector('#owner-notes-error').textContent.includes('meanwhile') && document.querySelector('#owner-notes').value === 'Ada, in Lisbon.'`)
	screenshots(t, ctx, "agents")
}

// A phone moving between networks: the page's reads fail at the network
// (fetch rejects, as Chromium's net::ERR_NETWORK_CHANGED makes it) the
// first two times each is sent. The Settings page still fills in, since a
// read is sent again; a write that fails so is not sent again, and the
// page says the server could not be reached. (Before: the Settings page's
// first failed read ended it with "Failed to fetch" and the lists empty.)
func TestWebReadsSurviveANetworkDrop(t *testing.T) {
	user, password, tok := webUser(t, "netdrop")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)

	// Every request to the account API is held by the browser; the first
	// two of each method and path fail as a dropped connection would.
	type paused struct {
		id  fetch.RequestID
		key string
	}
	held := make(chan paused, 64)
	_ = chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			select {
			case held <- paused{e.RequestID, e.Request.Method + " " + e.Request.URL}:
			default: // the test is over
			}
		}
	})
	var mu sync.Mutex
	failed := map[string]int{}
	sent := map[string]int{}
	go func() {
		for {
			var p paused
			select {
			case p = <-held:
			case <-ctx.Done():
				return
			}
			mu.Lock()
			drop := failed[p.key] < 2
			if drop {
				failed[p.key]++
			} else {
				sent[p.key]++
			}
			mu.Unlock()
			var err error
			if drop {
				_, err = chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: p.id, ErrorReason: network.ErrorReasonConnectionReset})
			} else {
				_, err = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: p.id})
			}
			if err != nil && ctx.Err() == nil {
				t.Logf("fetch interception of %s: %v", p.key, err)
			}
		}
	}()
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/api/*"}}}); err != nil {
		t.Fatalf("enable request interception: %v", err)
	}
	defer func() { _, _ = chromedp.Call(ctx, fetch.Disable, cdp.Empty{}) }()

	run(t, ctx, "settings", chromedp.Navigate(baseURL+"/app/#/settings"))
	until(t, ctx, "the sandbox state, the sessions and the tokens, after the drops",
		`/state: (running|paused|stopped)/.test(document.querySelector('#sandbox-state').textContent) && document.querySelectorAll('#session-list li').length >= 1 && document.querySelector('#token-list').children.length >= 1`)
	mu.Lock()
	for _, key := range []string{"GET " + baseURL + "/api/sandbox", "GET " + baseURL + "/api/tokens", "GET " + baseURL + "/api/sessions"} {
		if failed[key] != 2 || sent[key] < 1 {
			t.Errorf("%s: failed %d times, then sent %d times; want 2 failures, then sent", key, failed[key], sent[key])
		}
	}
	mu.Unlock()

	// A write is not sent again: the notification URL's PUT fails at the
	// network once, and the page says so; nothing reached the manager.
	run(t, ctx, "save a notification URL", chromedp.SetValue(chromedp.ID("notify-url"), "https://ntfy.invalid/netdrop-test"), chromedp.Click(chromedp.CSS(`#notify-form button`)))
	until(t, ctx, "the page says the server was not reached", `document.querySelector('#status-line').textContent.includes('could not reach the server')`)
	mu.Lock()
	if k := "PUT " + baseURL + "/api/notify"; failed[k] != 1 || sent[k] != 0 {
		t.Errorf("%s: failed %d times, sent %d times; want it tried once", k, failed[k], sent[k])
	}
	mu.Unlock()
	if r := request(t, "GET", "/api/notify", bearer(tok)); r.Code != 200 || strings.Contains(r.Body, "netdrop-test") {
		t.Fatalf("the notification URL after the write that failed at the network: %d %s", r.Code, r.Body)
	}
}

// The app's modules fail to load (a phone between networks; on this host,
// Chromium's net::ERR_NETWORK_CHANGED when a sandbox network appears): the
// page says so and loads itself again, rather than saying "connecting…"
// for ever. Tried: main.js fails at the network the first time it is
// fetched.
func TestWebLoadSurvivesAFailedModule(t *testing.T) {
	user, password, _ := webUser(t, "modfail")
	ctx, done := browser(t)
	defer done()
	signInInBrowser(t, ctx, user, password)

	var mu sync.Mutex
	failed, sent := 0, 0
	held := make(chan fetch.RequestID, 16)
	_ = chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			select {
			case held <- e.RequestID:
			default:
			}
		}
	})
	go func() {
		for {
			var id fetch.RequestID
			select {
			case id = <-held:
			case <-ctx.Done():
				return
			}
			mu.Lock()
			drop := failed == 0
			if drop {
				failed++
			} else {
				sent++
			}
			mu.Unlock()
			var err error
			if drop {
				_, err = chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: id, ErrorReason: network.ErrorReasonConnectionReset})
			} else {
				_, err = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
			}
			if err != nil && ctx.Err() == nil {
				t.Logf("fetch interception of main.js: %v", err)
			}
		}
	}()
	if _, err := chromedp.Call(ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		t.Fatalf("disable the cache: %v", err)
	}
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/app/static/main.js*"}}}); err != nil {
		t.Fatalf("enable request interception: %v", err)
	}
	defer func() { _, _ = chromedp.Call(ctx, fetch.Disable, cdp.Empty{}) }()

	run(t, ctx, "load the app again (one full load: another address)", chromedp.Navigate(baseURL+"/app/?again=1"))
	until(t, ctx, "the app loaded after all, its stream live", `document.body.dataset.up === '1' && document.querySelector('#stream-state').dataset.state === 'live'`)
	mu.Lock()
	defer mu.Unlock()
	if failed != 1 || sent < 1 {
		t.Fatalf("main.js failed %d times and was sent %d times; want one failure, then sent", failed, sent)
	}
}
