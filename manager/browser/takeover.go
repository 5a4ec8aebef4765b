package browser

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// The owner's take-over: a live view of an agent's tab in the web client
// (a screenshot at a time, of the tab sized to the owner's screen) and
// the owner's taps, keys and text sent to it. This is how a site that
// needs the owner's sign-in gets one: the owner types the password, never
// the model, and the sign-in stays in the profile. The owner's input is
// not checked the way the agent's is (a password field is what it is
// for); it reaches the web through the same guarded proxy all the same.

// Screen is the agent's tab as the live view shows it.
type Screen struct {
	JPEG []byte
	// URL is the tab's address, for the owner to see which site they are
	// typing into.
	URL string
	// Width and Height are the tab's viewport in CSS pixels (the image
	// may have more pixels: it is taken at the owner's pixel ratio).
	Width, Height int
}

// Input is one of the owner's gestures on the live view.
type Input struct {
	Kind string `json:"kind"` // tap, text, key, scroll, back, open
	// X and Y are a tap's place, as fractions of the screen's width and
	// height (0..1).
	X float64 `json:"x,omitempty"`
	Y float64 `json:"y,omitempty"`
	// Text is inserted where the page's focus is (text), or the address
	// to open (open).
	Text string `json:"text,omitempty"`
	// Key is one of Keys (key).
	Key string `json:"key,omitempty"`
	// DY is a scroll, as a fraction of the screen's height (negative: up).
	DY float64 `json:"dy,omitempty"`
	// Host is the site of the picture the owner acted on (Screen's URL):
	// an input is refused when the tab has moved to another site since
	// (another run of the agent, or the page, navigated it), so what the
	// owner types never lands on a page they did not see. Not needed to
	// open an address.
	Host string `json:"host,omitempty"`
}

// Own is where the owner's live view is served from (the host of the
// owner's request): a tab on it is not shown and takes no input, so the
// owner is never led to sign in to this platform inside the agent's
// browser, whose cookies the agent then acts with.
type Own struct{ Host string }

// Keys are the keys the live view can press, with their Windows key codes
// (what Chromium's key events want beside the name).
var Keys = map[string]int64{"Enter": 13, "Backspace": 8, "Tab": 9, "Escape": 27, "ArrowUp": 38, "ArrowDown": 40,
	"ArrowLeft": 37, "ArrowRight": 39, "PageUp": 33, "PageDown": 34, "Delete": 46}

// TextMax bounds the text of one input.
const TextMax = 2000

// fitting is the viewport the live view asked for.
type fitting struct{ w, h int64 }

// Screen returns a JPEG of agent's tab, sized to width × height CSS
// pixels at scale (the owner's screen; 0: as it is), bringing the sandbox
// up and the tab back to its last page if they went idle.
func (s *Service) Screen(ctx context.Context, user, agent string, own Own, width, height int, scale float64) (Screen, error) {
	if err := checkAgent(agent); err != nil {
		return Screen{}, err
	}
	var out Screen
	loc, err := s.owned(ctx, user, agent, own, "", false, func(ctx context.Context, t *tab) error {
		if width > 0 && height > 0 {
			if err := fit(ctx, t, width, height, scale); err != nil {
				return err
			}
		}
		quality := int64(70)
		return chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			m, err := cdp.Call(ctx, tg, cdppage.GetLayoutMetrics, cdp.Empty{})
			if err != nil {
				return err
			}
			if v := m.CSSVisualViewport; v != nil {
				out.Width, out.Height = int(v.ClientWidth), int(v.ClientHeight)
			}
			shot, err := cdp.Call(ctx, tg, cdppage.CaptureScreenshot, cdppage.CaptureScreenshotParams{Format: cdppage.CaptureScreenshotFormatJpeg, Quality: &quality})
			if err != nil {
				return err
			}
			out.JPEG = shot.Data
			return nil
		}))
	})
	if err != nil {
		return Screen{}, err
	}
	out.URL = loc
	return out, nil
}

// Input sends one of the owner's gestures to agent's tab.
func (s *Service) Input(ctx context.Context, user, agent string, own Own, in Input) error {
	if err := checkAgent(agent); err != nil {
		return err
	}
	if err := checkInput(in); err != nil {
		return err
	}
	site := in.Host
	if in.Kind == "open" {
		site = ""
		if own.Host != "" && hostOf(in.Text) == hostOf("http://"+own.Host) {
			return fmt.Errorf("%w: sign in to it in your own browser, never in the agent's", ErrOwnSite)
		}
	}
	_, err := s.owned(ctx, user, agent, own, site, in.Kind == "open", func(ctx context.Context, t *tab) error {
		err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			m, err := cdp.Call(ctx, tg, cdppage.GetLayoutMetrics, cdp.Empty{})
			if err != nil || m.CSSVisualViewport == nil {
				return fmt.Errorf("the tab's size: %v", err)
			}
			w, h := m.CSSVisualViewport.ClientWidth, m.CSSVisualViewport.ClientHeight
			switch in.Kind {
			case "tap":
				x, y := in.X*w, in.Y*h
				for _, typ := range []input.DispatchMouseEventType{input.DispatchMouseEventTypeMouseMoved, input.DispatchMouseEventTypeMousePressed, input.DispatchMouseEventTypeMouseReleased} {
					p := input.DispatchMouseEventParams{Type: typ, X: x, Y: y}
					if typ != input.DispatchMouseEventTypeMouseMoved {
						p.Button, p.ClickCount = input.MouseButtonLeft, 1
					}
					if typ == input.DispatchMouseEventTypeMousePressed {
						p.Buttons = 1
					}
					if _, err := cdp.Call(ctx, tg, input.DispatchMouseEvent, p); err != nil {
						return err
					}
				}
			case "scroll":
				_, err := cdp.Call(ctx, tg, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseWheel,
					X: w / 2, Y: h / 2, DeltaY: in.DY * h})
				return err
			case "text":
				_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: in.Text})
				return err
			case "key":
				code := Keys[in.Key]
				down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Key: in.Key, Code: in.Key,
					WindowsVirtualKeyCode: code, NativeVirtualKeyCode: code}
				if in.Key == "Enter" {
					down.Type, down.Text, down.UnmodifiedText = input.DispatchKeyEventTypeKeyDown, "\r", "\r"
				}
				up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: in.Key, Code: in.Key, WindowsVirtualKeyCode: code, NativeVirtualKeyCode: code}
				for _, p := range []input.DispatchKeyEventParams{down, up} {
					if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, p); err != nil {
						return err
					}
				}
			case "back":
				hist, err := cdp.Call(ctx, tg, cdppage.GetNavigationHistory, cdp.Empty{})
				if err != nil {
					return err
				}
				if hist.CurrentIndex < 1 || int(hist.CurrentIndex) > len(hist.Entries)-1 {
					return nil
				}
				_, err = cdp.Call(ctx, tg, cdppage.NavigateToHistoryEntry, cdppage.NavigateToHistoryEntryParams{EntryID: hist.Entries[hist.CurrentIndex-1].ID})
				return err
			case "open":
				return navigate(ctx, in.Text)
			}
			return nil
		}))
		if err != nil {
			return err
		}
		if in.Kind != "text" && in.Kind != "scroll" {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			settle(sctx) // the next screen shows what the tap started
			cancel()
		}
		return nil
	})
	if err == nil {
		detail := map[string]any{"agent": agent, "input": in.Kind}
		if in.Kind == "open" {
			detail["host"] = hostOf(in.Text)
		}
		s.audit(user, "browser.owner_input", detail) // never the text typed
	}
	return err
}

// owned runs fn in agent's tab for the owner, in the user's turn, and
// returns the tab's address after it; the address is kept and the
// profile's cookies saved (the owner's sign-in outlives the sandbox).
// Before fn the tab must not be on own's host, and, with site set, must
// be on site; opens makes a tab if the agent has none.
func (s *Service) owned(ctx context.Context, user, agent string, own Own, site string, opens bool, fn func(context.Context, *tab) error) (string, error) {
	u := s.user(user)
	if err := u.op.take(ctx); err != nil {
		return "", err
	}
	defer u.op.Unlock()
	u.lastUse = s.cfg.Now()
	defer func() { u.lastUse = s.cfg.Now() }()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	sess, t, err := s.tabFor(ctx, user, u, agent, opens)
	if err != nil {
		return "", err
	}
	actx, acancel := within(t, ctx)
	defer acancel()
	if !opens { // an address to open may lead away from anywhere
		err = onSite(actx, own, site)
	}
	if err == nil {
		err = fn(actx, t)
	}
	switch {
	case err == nil || errors.Is(err, ErrBadRequest) || errors.Is(err, ErrOtherSite) || errors.Is(err, ErrOwnSite):
	case !sess.alive():
		err = fmt.Errorf("%w: the browser sandbox went away; it restarts on the next call, with its profile", ErrBrowser)
	default:
		s.cfg.Log.Info("browser: the owner's input failed", "user", user, "agent", agent, "err", err)
		err = fmt.Errorf("%w: %s", ErrPage, netError(err))
	}
	loc, lerr := chromedp.Run(actx, chromedp.Location())
	if lerr == nil && isWeb(loc) {
		u.lastURL[agent] = loc
	}
	s.tidy(ctx, user, sess, true)
	return loc, err
}

// tidy follows an action or an input in a live session: the tabs a page
// opened are closed and, with cookies, the profile's cookies saved.
func (s *Service) tidy(ctx context.Context, user string, sess *session, cookies bool) {
	if !sess.alive() {
		return
	}
	cctx, cancel := context.WithTimeout(sess.root, 5*time.Second)
	closeStray(cctx, sess)
	cancel()
	if cookies {
		if err := s.saveCookies(ctx, sess); err != nil {
			s.cfg.Log.Warn("browser: save the cookies", "user", user, "err", err)
		}
	}
}

// onSite checks the tab's document (as Chromium's DOM says, not its
// scripts): not on own's host, and on site if set.
func onSite(ctx context.Context, own Own, site string) error {
	var at string
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		doc, err := cdp.Call(ctx, tg, dom.GetDocument, dom.GetDocumentParams{})
		if err == nil && doc.Root != nil {
			at = doc.Root.DocumentURL
		}
		return err
	}))
	if err != nil {
		return err
	}
	h := hostOf(at)
	if own.Host != "" && isWeb(at) && h == hostOf("http://"+own.Host) {
		return fmt.Errorf("%w: the agent's tab is on this platform's own site (%s); sign in here in your own browser, never in the agent's", ErrOwnSite, h)
	}
	if site != "" && h != hostOf("http://"+site) {
		return fmt.Errorf("%w: the tab is no longer on %s (it went to %s); look again before typing", ErrOtherSite, site, h)
	}
	return nil
}

// fit sizes the tab's viewport to the owner's screen, once per size.
func fit(ctx context.Context, t *tab, width, height int, scale float64) error {
	want := fitting{int64(min(max(width, 320), 1600)), int64(min(max(height, 320), 1600))}
	if t.fit == want {
		return nil
	}
	if math.IsNaN(scale) {
		scale = 1
	}
	scale = min(max(scale, 1), 3)
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			// Not "mobile": a phone's emulation lays a page without a
			// viewport tag out 980 px wide and zooms it out, and taps would
			// land elsewhere than the picture shows. A narrow window is
			// enough for a responsive site's phone layout.
			Width: want.w, Height: want.h, DeviceScaleFactor: scale})
		return err
	}))
	if err == nil {
		t.fit = want
	}
	return err
}

// unfit gives the tab back its own size before the agent acts in it.
func unfit(ctx context.Context, t *tab) {
	if t.fit == (fitting{}) {
		return
	}
	_ = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.ClearDeviceMetricsOverride, cdp.Empty{})
		return err
	}))
	t.fit = fitting{}
}

// agentName is an agent's name as the agents' API has it.
var agentName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

func checkAgent(agent string) error {
	if !agentName.MatchString(agent) {
		return fmt.Errorf("%w: agent is an agent's name (lower-case letters, digits, -)", ErrBadRequest)
	}
	return nil
}

func checkInput(in Input) error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(f, a...)) }
	switch in.Kind {
	case "tap":
		if !(in.X >= 0 && in.X <= 1 && in.Y >= 0 && in.Y <= 1) { // NaN fails too
			return bad("a tap's x and y are fractions of the screen, 0 to 1")
		}
	case "scroll":
		if !(in.DY >= -5 && in.DY <= 5) || in.DY == 0 {
			return bad("a scroll's dy is a fraction of the screen's height, -5 to 5, not 0")
		}
	case "text":
		if in.Text == "" || len(in.Text) > TextMax || strings.IndexFunc(in.Text, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) >= 0 {
			return bad("text is 1 to %d bytes, without control characters", TextMax)
		}
	case "key":
		if _, ok := Keys[in.Key]; !ok {
			return bad("unknown key %q", in.Key)
		}
	case "back":
	case "open":
		u, err := url.Parse(in.Text)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || hostOf(in.Text) == "" || len(in.Text) > 4096 {
			return bad("open wants an absolute http or https URL")
		}
	default:
		return bad("unknown input %q (tap, text, key, scroll, back, open)", in.Kind)
	}
	if in.Kind != "open" && (in.Host == "" || len(in.Host) > 300) {
		return bad("host is the site of the picture the input was made on")
	}
	return nil
}

// tabFor returns agent's tab, made if need be. A tab the sandbox lost
// (paused, stopped, removed, killed) opens again at its last page, unless
// the action opens a page itself (opens); with no last page and no page to
// open it is ErrNoPage. Caller holds the turn.
func (s *Service) tabFor(ctx context.Context, user string, u *userState, agent string, opens bool) (*session, *tab, error) {
	sess, err := s.ensure(ctx, user, u)
	if err != nil {
		return nil, nil, err
	}
	t := sess.tabs[agent]
	if t != nil && tabGone(t) { // the page closed it (window.close)
		t.cancel()
		delete(sess.tabs, agent)
		t = nil
	}
	if t != nil {
		return sess, t, nil
	}
	reopen := u.lastURL[agent]
	if !opens && reopen == "" {
		return nil, nil, fmt.Errorf("%w: call browser_open first", ErrNoPage)
	}
	tctx, tcancel := chromedp.NewContext(sess.root)
	// The first run makes the tab for as long as tctx lives: it must have
	// no deadline of its own (a timer ends tctx instead).
	timer := time.AfterFunc(s.cfg.Timeout, tcancel)
	err = chromedp.Do(tctx)
	timer.Stop()
	if err != nil {
		tcancel()
		return nil, nil, fmt.Errorf("%w: open a tab: %v", ErrBrowser, err)
	}
	t = &tab{ctx: tctx, cancel: tcancel}
	sess.tabs[agent] = t
	dismissDialogs(tctx)
	if reopen != "" && !opens {
		// The tab went with its sandbox: open it again where it was.
		actx, cancel := within(t, ctx)
		defer cancel()
		if err := navigate(actx, reopen); err != nil {
			s.cfg.Log.Info("browser: reopen the tab's last page", "user", user, "url", reopen, "err", err)
			return nil, nil, fmt.Errorf("%w: the tab's last page did not open again after the browser restarted (%s); call browser_open", ErrPage, netError(err))
		}
	}
	return sess, t, nil
}

// within is a context of the tab's that ends when ctx does.
func within(t *tab, ctx context.Context) (context.Context, context.CancelFunc) {
	actx, cancel := context.WithCancel(t.ctx)
	stop := context.AfterFunc(ctx, cancel)
	return actx, func() { stop(); cancel() }
}

// audit records an event in the user's Activity, if the service has a
// place for it.
// It does not wait: the user's turn is not held on the registry.
func (s *Service) audit(user, kind string, detail map[string]any) {
	if s.cfg.Audit != nil {
		go s.cfg.Audit(user, kind, detail)
	}
}
