package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/affido/affido/internal/browserapi"
	"github.com/affido/affido/internal/gatewayapi"
)

// Do runs one browser action for user's agent (one at a time per user),
// bringing the user's browser sandbox up first if need be.
func (s *Service) Do(ctx context.Context, user string, req gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, error) {
	if err := check(req); err != nil {
		return gatewayapi.BrowserPage{}, err
	}
	u := s.user(user)
	u.op.Lock()
	defer u.op.Unlock()
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
	sess, err := s.ensure(ctx, user, u)
	if err != nil {
		return gatewayapi.BrowserPage{}, err
	}
	t := sess.tabs[req.Agent]
	reopen := ""
	if t == nil {
		reopen = u.lastURL[req.Agent]
		if req.Action != gatewayapi.BrowserOpen && reopen == "" {
			return gatewayapi.BrowserPage{}, fmt.Errorf("%w: call browser_open first", ErrNoPage)
		}
		tctx, tcancel := chromedp.NewContext(sess.root)
		// The first run makes the tab for as long as tctx lives: it must
		// have no deadline of its own (a timer ends tctx instead).
		timer := time.AfterFunc(s.cfg.Timeout, tcancel)
		err := chromedp.Do(tctx)
		timer.Stop()
		if err != nil {
			tcancel()
			return gatewayapi.BrowserPage{}, fmt.Errorf("%w: open a tab: %v", ErrBrowser, err)
		}
		t = &tab{ctx: tctx, cancel: tcancel}
		sess.tabs[req.Agent] = t
	}
	// The action runs in the tab, bounded by the request's deadline.
	actx, acancel := context.WithCancel(t.ctx)
	defer acancel()
	stop := context.AfterFunc(ctx, acancel)
	defer stop()
	if reopen != "" && req.Action != gatewayapi.BrowserOpen {
		// The tab went with its sandbox: open it again where it was.
		if err := navigate(actx, reopen); err != nil {
			return gatewayapi.BrowserPage{}, fmt.Errorf("%w: reopen %s after the browser restarted: %v", ErrBrowser, reopen, err)
		}
	}

	page, err := s.act(actx, sess, req)
	if err != nil && !errors.Is(err, ErrPassword) && !errors.Is(err, ErrOtherSite) && !errors.Is(err, ErrNoElement) && !errors.Is(err, ErrBadRequest) && !sess.alive() {
		err = fmt.Errorf("%w: the browser sandbox went away during the action (%v); it restarts on the next call, with its profile", ErrBrowser, err)
	}
	if page.URL == "" && err == nil {
		page.URL, _ = chromedp.Run(actx, chromedp.Location())
	}
	if err == nil && page.URL != "" && page.URL != "about:blank" {
		u.lastURL[req.Agent] = page.URL
	}
	if err == nil && sess.alive() {
		if cerr := s.saveCookies(ctx, sess); cerr != nil {
			s.cfg.Log.Warn("browser: save the cookies", "user", user, "err", cerr)
		}
	}
	page.Refused, page.RefusedTo = u.refused.since(mark)
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
		if req.Selector == "" || req.FileName == "" || path.Base(req.FileName) != req.FileName || strings.HasPrefix(req.FileName, ".") {
			return bad("upload wants a selector and a plain file name")
		}
		if len(req.File) > gatewayapi.BrowserUploadMax {
			return bad("the file is larger than %d bytes", gatewayapi.BrowserUploadMax)
		}
	case gatewayapi.BrowserRead, gatewayapi.BrowserScreenshot, gatewayapi.BrowserClose:
	default:
		return bad("unknown action %q", req.Action)
	}
	if needURL {
		u, err := url.Parse(req.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return bad("url must be an absolute http or https URL, not %q", req.URL)
		}
	}
	return nil
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
}

// onSite refuses an action on a page whose host is not the one the call
// names: the owner's rule for a site allows acting on that site only.
func onSite(ctx context.Context, want string) error {
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return err
	}
	if loc == "" || loc == "about:blank" {
		return fmt.Errorf("%w: call browser_open first", ErrNoPage)
	}
	if hostOf(loc) != hostOf(want) {
		return fmt.Errorf("%w: the page is %s, not on %s", ErrOtherSite, loc, hostOf(want))
	}
	return nil
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
		page.Title, _ = chromedp.Run(ctx, chromedp.Title())
		return page, nil
	case gatewayapi.BrowserRead:
		return s.read(ctx)
	case gatewayapi.BrowserScreenshot:
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		page.PNG = png
		return page, err
	}
	if err := onSite(ctx, req.URL); err != nil {
		return page, err
	}
	switch req.Action {
	case gatewayapi.BrowserClick:
		var sel string
		if req.Selector != "" {
			sel = req.Selector
		}
		// The element is found once, in the page, and clicked there: by
		// selector, or the first link or button whose text is Text.
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
  const sel = %s, text = %s;
  let el = sel ? document.querySelector(sel) : null;
  if (!sel) el = [...document.querySelectorAll('a,button,input[type=submit],input[type=button],[role=button]')]
    .find(e => (e.innerText || e.value || '').trim() === text.trim());
  if (!el) return false;
  el.scrollIntoView({block: 'center'});
  el.click();
  return true;
})()`, js(sel), js(req.Text))))
		if err != nil {
			return page, err
		}
		if !ok {
			return page, fmt.Errorf("%w: %s", ErrNoElement, firstOf(req.Selector, req.Text))
		}
		settle(ctx)
		page.Title, _ = chromedp.Run(ctx, chromedp.Title())
		return page, nil
	case gatewayapi.BrowserType:
		kind, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
  const el = document.querySelector(%s);
  if (!el) return "";
  const ac = (el.getAttribute('autocomplete') || '').toLowerCase();
  if ((el.type || '').toLowerCase() === 'password' || ac.includes('password')) return "password";
  el.focus();
  return "ok";
})()`, js(req.Selector))))
		if err != nil {
			return page, err
		}
		switch kind {
		case "":
			return page, fmt.Errorf("%w: %s", ErrNoElement, req.Selector)
		case "password":
			return page, fmt.Errorf("%w: %s is a password field; ask the owner to sign in (browser_take_over)", ErrPassword, req.Selector)
		}
		text := req.Text
		if req.Submit {
			text += "\r"
		}
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(req.Selector), text)); err != nil {
			return page, err
		}
		if req.Submit {
			settle(ctx)
		}
		page.Title, _ = chromedp.Run(ctx, chromedp.Title())
		return page, nil
	case gatewayapi.BrowserUpload:
		if err := sendFile(sess.mux, req.FileName, req.File); err != nil {
			return page, err
		}
		err := chromedp.Do(ctx, chromedp.SetUploadFiles(chromedp.CSS(req.Selector), []string{path.Join(browserapi.UploadDir, req.FileName)}))
		return page, err
	}
	return page, fmt.Errorf("%w: unknown action %q", ErrBadRequest, req.Action)
}

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
			return fmt.Errorf("%s", res.ErrorText)
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
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
  const q = (el) => {
    if (el.id) return '#' + CSS.escape(el.id);
    if (el.name) return el.tagName.toLowerCase() + '[name="' + el.name.replace(/"/g, '\\"') + '"]';
    return null;
  };
  const fields = [];
  for (const el of document.querySelectorAll('input,textarea,select,button')) {
    if (fields.length >= 50) break;
    const sel = q(el);
    if (!sel) continue;
    const kind = el.tagName === 'INPUT' ? (el.type || 'text') : el.tagName.toLowerCase();
    if (kind === 'hidden') continue;
    const label = (el.labels && el.labels[0] ? el.labels[0].innerText : '') || el.placeholder || el.innerText || el.value || '';
    fields.push({selector: sel, kind: kind, label: label.trim().slice(0, 80)});
  }
  return JSON.stringify({title: document.title, text: document.body ? document.body.innerText : '', fields: fields});
})()`))
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
