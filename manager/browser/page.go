package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"golang.org/x/net/idna"

	"github.com/affido/affido/internal/browserapi"
	"github.com/affido/affido/internal/gatewayapi"
)

// Do runs one browser action for user's agent (one at a time per user),
// bringing the user's browser sandbox up first if need be.
func (s *Service) Do(ctx context.Context, user string, req gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, error) {
	p, _, err := s.Act(ctx, user, req)
	return p, err
}

// Act is Do, and says how long the action held the browser (its wait
// for the user's turn not counted): what it is charged for.
func (s *Service) Act(ctx context.Context, user string, req gatewayapi.BrowserRequest) (_ gatewayapi.BrowserPage, held time.Duration, _ error) {
	if err := check(req); err != nil {
		return gatewayapi.BrowserPage{}, 0, err
	}
	u := s.user(user)
	if err := u.op.take(ctx); err != nil {
		return gatewayapi.BrowserPage{}, 0, err
	}
	defer u.op.Unlock()
	took := time.Now()
	defer func() { held = time.Since(took) }()
	p, err := s.act1(ctx, user, u, req)
	return p, 0, err
}

// act1 is one action, in the user's turn.
func (s *Service) act1(ctx context.Context, user string, u *userState, req gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, error) {
	u.lastUse = s.cfg.Now()
	defer func() { u.lastUse = s.cfg.Now() }()
	mark := u.refused.mark()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()

	if req.Action == gatewayapi.BrowserClose {
		delete(u.lastURL, req.Agent)
		if u.sess.alive() {
			if t := u.sess.tabs[req.Agent]; t != nil {
				t.cancel()
				delete(u.sess.tabs, req.Agent)
			}
		}
		return gatewayapi.BrowserPage{}, nil
	}
	if req.Action == gatewayapi.BrowserSaveDownload {
		// A download lives as long as the session that saw it begin.
		var p gatewayapi.BrowserPage
		err := fmt.Errorf("%w: no download %q: the browser restarted since; download it again", ErrNoElement, req.Download)
		if u.sess.alive() {
			p, err = saveDownload(u.sess, u.sess.tabs[req.Agent], req.Download)
		}
		s.audit(user, "browser.action", map[string]any{"agent": req.Agent, "action": req.Action, "download": req.Download, "ok": err == nil})
		return p, err
	}
	sess, t, err := s.tabFor(ctx, user, u, req.Agent, req.Action == gatewayapi.BrowserOpen)
	if err != nil {
		return gatewayapi.BrowserPage{}, err
	}
	// The action runs in the tab, bounded by the request's deadline.
	actx, acancel := within(t, ctx)
	defer acancel()
	unfit(actx, t)
	page, err := s.act(actx, sess, req)
	switch {
	case err == nil || errors.Is(err, ErrPassword) || errors.Is(err, ErrOtherSite) || errors.Is(err, ErrNoElement) || errors.Is(err, ErrBadRequest):
	case !sess.alive():
		s.cfg.Log.Warn("browser: the sandbox went away during an action", "user", user, "err", err)
		err = fmt.Errorf("%w: the browser sandbox went away during the action; it restarts on the next call, with its profile", ErrBrowser)
	default:
		// What a page's scripts throw is the page's text: the model gets
		// our words and Chromium's error code, never the page's.
		s.cfg.Log.Info("browser: an action failed", "user", user, "action", req.Action, "err", err)
		err = fmt.Errorf("%w: %s", ErrPage, netError(err))
	}
	s.audit(user, "browser.action", map[string]any{"agent": req.Agent, "action": req.Action, "host": hostOf(req.URL), "ok": err == nil})
	if page.URL == "" && err == nil {
		page.URL, _ = chromedp.Run(actx, chromedp.Location())
	}
	if err == nil && page.URL != "" && page.URL != "about:blank" {
		u.lastURL[req.Agent] = page.URL
	}
	s.tidy(ctx, user, sess, err == nil)
	page.Refused, page.RefusedTo = u.refused.since(mark)
	page.Downloads = sess.downloads.of(frameOf(sess.tabs[req.Agent]))
	return page, err
}

func check(req gatewayapi.BrowserRequest) error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(f, a...)) }
	if req.Agent == "" || len(req.Agent) > 64 {
		return bad("agent is required")
	}
	needURL := false
	switch req.Action {
	case gatewayapi.BrowserOpen:
		needURL = true
	case gatewayapi.BrowserClick:
		needURL = true
		if req.Selector == "" && req.Text == "" {
			return bad("click wants a selector or the text of a link or button")
		}
	case gatewayapi.BrowserType:
		needURL = true
		if req.Selector == "" {
			return bad("type wants a selector")
		}
	case gatewayapi.BrowserUpload:
		needURL = true
		if req.Selector == "" || req.FileName == "" || path.Base(req.FileName) != req.FileName || strings.HasPrefix(req.FileName, ".") ||
			strings.IndexFunc(req.FileName, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 || len(req.FileName) > 200 {
			return bad("upload wants a selector and a plain file name")
		}
		if len(req.File) > gatewayapi.BrowserUploadMax {
			return bad("the file is larger than %d bytes", gatewayapi.BrowserUploadMax)
		}
	case gatewayapi.BrowserSaveDownload:
		if req.Download == "" || len(req.Download) > 64 {
			return bad("save_download wants a download's id")
		}
	case gatewayapi.BrowserRead, gatewayapi.BrowserScreenshot, gatewayapi.BrowserClose:
	default:
		return bad("unknown action %q", req.Action)
	}
	if needURL {
		u, err := url.Parse(req.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || hostOf(req.URL) == "" {
			return bad("url must be an absolute http or https URL, not %q", req.URL)
		}
	}
	return nil
}

// hostOf is a URL's host as the page's location says it: lower case, no
// trailing dot, an international name in its ASCII form; "" when there is
// none.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	h := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := idna.Lookup.ToASCII(h); err == nil {
		h = a
	}
	return h
}

// isWeb reports whether a document's address is an http or https page
// (not about:blank, data: or a srcdoc, which carry no host to check).
func isWeb(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != ""
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (s *Service) act(ctx context.Context, sess *session, req gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, error) {
	var page gatewayapi.BrowserPage
	switch req.Action {
	case gatewayapi.BrowserOpen:
		if err := navigate(ctx, req.URL); err != nil {
			return page, err
		}
		page.Status, _ = chromedp.Run(ctx, chromedp.Evaluate[int](`(performance.getEntriesByType('navigation')[0] || {}).responseStatus || 0`))
		page.Title, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`document.title.slice(0, 300)`))
		return page, nil
	case gatewayapi.BrowserRead:
		return s.read(ctx)
	case gatewayapi.BrowserScreenshot:
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		page.PNG = png
		return page, err
	}
	switch req.Action {
	case gatewayapi.BrowserClick:
		// Found, checked and clicked in one evaluation in the page: the
		// site check reads location (which a page cannot redefine) in the
		// same turn as the click, so the page cannot move in between.
		res, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
  const want = %s, sel = %s, text = %s;
  if (!/^https?:$/.test(location.protocol) || location.hostname.toLowerCase().replace(/\.$/, '').replace(/^\[(.*)\]$/, '$1') !== want) return "other-site:";
  let el = sel ? document.querySelector(sel) : null;
  if (!sel) el = [...document.querySelectorAll('a,button,input[type=submit],input[type=button],[role=button]')]
    .find(e => (e.innerText || e.value || '').trim() === text.trim());
  if (!el) return "none";
  if (el.tagName === 'INPUT' && (el.getAttribute('type') || '').toLowerCase() === 'file') return "file";
  el.scrollIntoView({block: 'center'});
  el.click();
  return "ok";
})()`, js(hostOf(req.URL)), js(req.Selector), js(req.Text))))
		if err != nil {
			return page, err
		}
		switch {
		case strings.HasPrefix(res, "other-site:"):
			return page, fmt.Errorf("%w: the tab's page is not on %s", ErrOtherSite, hostOf(req.URL))
		case res == "none":
			return page, fmt.Errorf("%w: %s", ErrNoElement, firstOf(req.Selector, req.Text))
		case res == "file":
			return page, fmt.Errorf("%w: that is a file input; give it a file with browser_upload, which asks the owner", ErrBadRequest)
		}
		settle(ctx)
		return page, nil
	case gatewayapi.BrowserType:
		if err := typeInto(ctx, hostOf(req.URL), req.Selector, req.Text, req.Submit); err != nil {
			return page, err
		}
		if req.Submit {
			settle(ctx)
		}
		return page, nil
	case gatewayapi.BrowserUpload:
		if err := sendFile(sess.mux, req.FileName, req.File); err != nil {
			return page, err
		}
		err := onElement(ctx, hostOf(req.URL), req.Selector, func(ctx context.Context, t *chromedp.Target, el element) error {
			if el.name != "INPUT" || strings.ToLower(el.attrs["type"]) != "file" {
				return fmt.Errorf("%w: %s is not a file input", ErrBadRequest, req.Selector)
			}
			_, err := cdp.Call(ctx, t, dom.SetFileInputFiles, dom.SetFileInputFilesParams{NodeID: el.id,
				Files: []string{path.Join(browserapi.UploadDir, req.FileName)}})
			return err
		})
		return page, err
	}
	return page, fmt.Errorf("%w: unknown action %q", ErrBadRequest, req.Action)
}

// element is a node of the tab's top document, described by the DOM
// (not by the page's scripts, which could lie about an element's type).
type element struct {
	id    cdp.NodeID
	name  string // upper case
	attrs map[string]string
}

// onElement finds selector in the tab's top document and runs fn on that
// node, after checking that the document the node belongs to is on host.
// The document's address and the node come from one snapshot of the DOM:
// if the page navigates after, the node is gone and fn fails; it never
// finds a same-named node of the next page.
func onElement(ctx context.Context, host, selector string, fn func(context.Context, *chromedp.Target, element) error) error {
	return chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		doc, err := cdp.Call(ctx, t, dom.GetDocument, dom.GetDocumentParams{})
		if err != nil {
			return err
		}
		if doc.Root == nil || !isWeb(doc.Root.DocumentURL) || hostOf(doc.Root.DocumentURL) != host {
			return fmt.Errorf("%w: the tab's page is not on %s", ErrOtherSite, host)
		}
		q, err := cdp.Call(ctx, t, dom.QuerySelector, dom.QuerySelectorParams{NodeID: doc.Root.NodeID, Selector: selector})
		if err != nil || q.NodeID == 0 {
			return fmt.Errorf("%w: %s", ErrNoElement, selector)
		}
		d, err := cdp.Call(ctx, t, dom.DescribeNode, dom.DescribeNodeParams{NodeID: q.NodeID})
		if err != nil || d.Node == nil {
			return fmt.Errorf("%w: %s", ErrNoElement, selector)
		}
		el := element{id: q.NodeID, name: strings.ToUpper(d.Node.NodeName), attrs: map[string]string{}}
		for i := 0; i+1 < len(d.Node.Attributes); i += 2 {
			el.attrs[strings.ToLower(d.Node.Attributes[i])] = d.Node.Attributes[i+1]
		}
		return fn(ctx, t, el)
	}))
}

// textTypes are the input types the agent may type into.
var textTypes = map[string]bool{"": true, "text": true, "search": true, "email": true, "url": true, "tel": true, "number": true}

// typeInto sets a text field's value, on the node that was checked: no
// keys are sent (a page could move the focus between a check and the
// keys), so what is typed lands in that field or nowhere. A password
// field, or one that says it holds a password, is refused; so is
// anything that is not a text field (a file input takes a path).
func typeInto(ctx context.Context, host, selector, text string, submit bool) error {
	return onElement(ctx, host, selector, func(ctx context.Context, t *chromedp.Target, el element) error {
		typ := strings.ToLower(el.attrs["type"])
		if typ == "password" || strings.Contains(strings.ToLower(el.attrs["autocomplete"]), "password") {
			return fmt.Errorf("%w: %s is a password field; ask the owner to sign in", ErrPassword, selector)
		}
		if !(el.name == "TEXTAREA" || (el.name == "INPUT" && textTypes[typ])) {
			return fmt.Errorf("%w: %s is not a text field", ErrBadRequest, selector)
		}
		obj, err := cdp.Call(ctx, t, dom.ResolveNode, dom.ResolveNodeParams{NodeID: el.id})
		if err != nil || obj.Object == nil {
			return fmt.Errorf("%w: %s", ErrNoElement, selector)
		}
		yes := true
		res, err := cdp.Call(ctx, t, runtime.CallFunctionOn, runtime.CallFunctionOnParams{ObjectID: obj.Object.ObjectID,
			FunctionDeclaration: fmt.Sprintf(`function() {
  const proto = this.tagName === 'TEXTAREA' ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  Object.getOwnPropertyDescriptor(proto, 'value').set.call(this, %s);
  this.dispatchEvent(new Event('input', {bubbles: true}));
  this.dispatchEvent(new Event('change', {bubbles: true}));
  if (!%t) return "ok";
  if (!this.form) return "no-form";
  // The form's own action (a field named "action" cannot shadow it here).
  const action = Object.getOwnPropertyDescriptor(HTMLFormElement.prototype, 'action').get.call(this.form);
  let h = '';
  try { h = new URL(action).hostname.toLowerCase().replace(/\.$/, '').replace(/^\[(.*)\]$/, '$1'); } catch (e) {}
  if (h !== %s) return "other-site";
  HTMLFormElement.prototype.requestSubmit.call(this.form);
  return "ok";
}`, js(text), submit, js(host)), ReturnByValue: &yes})
		if err != nil {
			return err
		}
		if res.ExceptionDetails != nil {
			return fmt.Errorf("the page refused the text (an exception in its scripts)")
		}
		var said string
		if res.Result != nil {
			_ = json.Unmarshal(res.Result.Value, &said)
		}
		switch said {
		case "no-form":
			return fmt.Errorf("%w: typed, but %s is in no form to submit", ErrBadRequest, selector)
		case "other-site":
			return fmt.Errorf("%w: typed, not submitted: the form sends to another site than %s", ErrOtherSite, host)
		}
		return nil
	})
}

var netCode = regexp.MustCompile(`net::ERR_[A-Z_]+`)

// netError names what went wrong without the page's words: Chromium's
// network error code if there is one.
func netError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "the page did not finish in time"
	}
	var nav navError
	if errors.As(err, &nav) {
		if c := netCode.FindString(nav.text); c != "" && len(c) < 60 {
			return "the page could not be loaded (" + c + ")"
		}
		return "the page could not be loaded"
	}
	return "the action failed in the page"
}

// navError is Chromium's own word on a navigation that failed (Page.navigate's
// errorText), the one error text that does not come from the page.
type navError struct{ text string }

func (e navError) Error() string { return e.text }

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// navigate loads url in the tab and waits for its document to be parsed,
// and (within a bound) for its subresources: a page that never finishes
// loading (a tarpit) does not hold the call.
func navigate(ctx context.Context, url string) error {
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		res, err := cdp.Call(ctx, t, cdppage.Navigate, cdppage.NavigateParams{URL: url})
		if err != nil {
			return err
		}
		if res.ErrorText != "" {
			return navError{res.ErrorText}
		}
		return nil
	}))
	if err != nil {
		return fmt.Errorf("open %s: %w", url, err)
	}
	if err := until(ctx, `document.readyState !== "loading" && location.href !== "about:blank"`); err != nil {
		return fmt.Errorf("open %s: %w", url, err)
	}
	settle(ctx)
	return nil
}

// until evaluates expr in the page every 100 ms until it is true or ctx
// ends. An evaluation that fails (the document changed under it) is
// tried again.
func until(ctx context.Context, expr string) error {
	for {
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// settle waits, within a bound, for what a click or a submit started: a
// navigation to be loaded.
func settle(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A new document starts "loading"; give it a moment to start, then
	// wait for it to be complete.
	_ = until(sctx, `document.readyState === "complete"`)
}

// read is the page's text (outside text, capped) and its fields.
func (s *Service) read(ctx context.Context) (gatewayapi.BrowserPage, error) {
	var page gatewayapi.BrowserPage
	var got struct {
		Title  string                    `json:"title"`
		Text   string                    `json:"text"`
		Fields []gatewayapi.BrowserField `json:"fields"`
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
  const q = (el) => {
    if (el.id && el.id.length <= 100) return '#' + CSS.escape(el.id);
    if (el.name && el.name.length <= 100) return el.tagName.toLowerCase() + '[name="' + el.name.replace(/["\\]/g, '\\$&') + '"]';
    return null;
  };
  const fields = [];
  for (const el of document.querySelectorAll('input,textarea,select,button')) {
    if (fields.length >= 50) break;
    const sel = q(el);
    if (!sel) continue;
    const kind = el.tagName === 'INPUT' ? (el.type || 'text') : el.tagName.toLowerCase();
    if (kind === 'hidden') continue;
    const isButton = el.tagName === 'BUTTON' || ['submit', 'button', 'reset'].includes(kind);
    // A field's value is never read out (a filled password field has one).
    const label = (el.labels && el.labels[0] ? el.labels[0].innerText : '') || el.placeholder || (isButton ? (el.innerText || el.value) : '') || '';
    fields.push({selector: sel, kind: kind, label: label.trim().slice(0, 80)});
  }
  // Cut here, not in the manager: a page of a hundred megabytes of text
  // costs the manager nothing.
  return JSON.stringify({title: document.title.slice(0, 300), text: document.body ? document.body.innerText.slice(0, %d) : '', fields: fields});
})()`, gatewayapi.BrowserTextMax+1)))
	if err != nil {
		return page, err
	}
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		return page, fmt.Errorf("read the page: %w", err)
	}
	page.Title, page.Text, page.Fields = got.Title, got.Text, got.Fields
	if len(page.Text) > gatewayapi.BrowserTextMax {
		page.Text, page.Truncated = page.Text[:gatewayapi.BrowserTextMax], true
	}
	return page, nil
}

// dismissDialogs answers every JavaScript dialog of the tab (alert,
// confirm, prompt, beforeunload) with "cancel", at once: a dialog would
// otherwise hold the tab until the owner closed it.
func dismissDialogs(tab context.Context) {
	opened := make(chan bool, 16) // true: a beforeunload, which is accepted (the agent's navigation goes on)
	_ = chromedp.Listen(tab, func(ev any) {
		if d, ok := ev.(*cdppage.EventJavascriptDialogOpening); ok {
			select {
			case opened <- d.Type == cdppage.DialogTypeBeforeunload:
			default:
			}
		}
	})
	go func() {
		for {
			select {
			case <-tab.Done():
				return
			case leave := <-opened:
				dctx, cancel := context.WithTimeout(tab, 5*time.Second)
				_ = chromedp.Do(dctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
					_, err := cdp.Call(ctx, t, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: leave})
					return err
				}))
				cancel()
			}
		}
	}()
}

// closeStray closes the tabs a page opened (a popup, a link to a new
// window): only the agents' own tabs stay open.
func closeStray(ctx context.Context, sess *session) {
	keep := map[string]bool{}
	if c := chromedp.FromContext(sess.root); c != nil && c.Target != nil {
		keep[string(c.Target.TargetID)] = true
	}
	for _, t := range sess.tabs {
		if c := chromedp.FromContext(t.ctx); c != nil && c.Target != nil {
			keep[string(c.Target.TargetID)] = true
		}
	}
	infos, err := chromedp.Targets(ctx)
	if err != nil {
		return
	}
	browser := chromedp.FromContext(sess.root).Browser
	for _, in := range infos {
		if in.Type == "page" && !keep[string(in.TargetID)] {
			_, _ = cdp.Call(ctx, browser, target.CloseTarget, target.CloseTargetParams{TargetID: in.TargetID})
		}
	}
}

// tabGone reports whether the browser detached the tab (it was closed).
func tabGone(t *tab) bool {
	gone, err := chromedp.Detached(t.ctx)
	if err != nil {
		return true
	}
	select {
	case <-gone:
		return true
	default:
		return false
	}
}
