package browser

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/yamux"

	"github.com/affido/affido/internal/browserapi"
)

// session is the manager's connection to one running browser sandbox:
// the bridge's yamux session, the CDP stream over it, and a tab per agent.
type session struct {
	mux    *yamux.Session
	root   context.Context // holds the browser (its own blank tab)
	cancel context.CancelFunc
	tabs   map[string]*tab
	// cookies is the sha256 of the cookies the sandbox keeps.
	cookies [32]byte
	// downloads are the files pages downloaded in this session.
	downloads *downloads
}

type tab struct {
	ctx    context.Context
	cancel context.CancelFunc
	fit    fitting // the live view's size, while the owner looks
}

// attach is a chromedp allocator for a browser that runs already, over a
// transport of our own (the CDP stream).
type attach struct{ tr chromedp.Transport }

func (a attach) Allocate(ctx context.Context, opts ...chromedp.BrowserOption) (*chromedp.Browser, error) {
	return chromedp.NewBrowserTransport(ctx, a.tr, opts...)
}
func (attach) Wait()          {}
func (attach) Attaches() bool { return true }

func (s *session) alive() bool {
	if s == nil {
		return false
	}
	select {
	case <-s.mux.CloseChan():
		return false
	case <-s.root.Done():
		return false
	default:
		return true
	}
}

func (s *session) close() {
	for _, t := range s.tabs {
		t.cancel()
	}
	s.cancel()
	s.mux.Close()
}

// ensure brings the user's sandbox up and connects to it, unless a live
// session is there. Caller holds u.op.
func (s *Service) ensure(ctx context.Context, user string, u *userState) (*session, error) {
	if u.sess.alive() {
		return u.sess, nil
	}
	if u.sess != nil {
		u.sess.close()
		u.sess = nil
	}
	if err := s.cfg.Engine.Up(ctx, user); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBrowser, err)
	}
	if u.tier != tierUp {
		s.audit(user, "browser.started", map[string]any{"from": tierNames[u.tier]})
	}
	u.tier = tierUp
	sess, err := s.connect(ctx, user, u)
	if err != nil {
		return nil, err
	}
	u.sess = sess
	return sess, nil
}

// connect starts a bridge (polling until the sandbox's main process
// answers: it listens a moment after the container starts), serves the
// proxy streams the sandbox opens, and attaches chromedp to the CDP stream.
func (s *Service) connect(ctx context.Context, user string, u *userState) (*session, error) {
	deadline := time.Now().Add(s.cfg.Timeout)
	var mux *yamux.Session
	var last error
	for {
		conn, err := s.cfg.Engine.Bridge(ctx, user)
		if err == nil {
			mux, err = yamux.Client(conn, browserapi.Session())
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = ping(pctx, mux)
				cancel()
				if err == nil {
					break
				}
				mux.Close()
			} else {
				conn.Close()
			}
		}
		last = err
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%w: no bridge to %s's browser: %v", ErrBrowser, user, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(150 * time.Millisecond):
		}
	}
	life, stop := context.WithCancel(context.Background())
	go func() {
		<-mux.CloseChan()
		stop()
	}()
	go s.acceptProxy(life, user, u, mux)

	st, err := mux.Open()
	if err == nil {
		_, err = st.Write([]byte{browserapi.StreamCDP})
	}
	if err != nil {
		stop()
		mux.Close()
		return nil, fmt.Errorf("%w: open the CDP stream: %v", ErrBrowser, err)
	}
	actx, _ := chromedp.NewAllocatorContext(life, attach{chromedp.NewPipeConn(&cappedMessages{r: st, c: st}, st)})
	root, cancel := chromedp.NewContext(actx, chromedp.WithLogf(func(string, ...any) {}), chromedp.WithErrorf(func(string, ...any) {}))
	// The first run attaches the browser for as long as root lives: it
	// must have no deadline of its own (a timer ends root instead).
	rctx := root
	timer := time.AfterFunc(s.cfg.Timeout, cancel)
	defer timer.Stop()
	// Downloads stay in the sandbox: a file lands in the workspace only
	// through a tool call the owner allowed, never by a page's say-so.
	dls := &downloads{}
	err = allowDownloads(rctx, dls)
	if err != nil {
		cancel()
		stop()
		mux.Close()
		return nil, fmt.Errorf("%w: attach to the browser: %v", ErrBrowser, err)
	}
	closeOrphans(rctx)
	sess := &session{mux: mux, root: root, cancel: func() { cancel(); stop() }, tabs: map[string]*tab{}, downloads: dls}
	if err := s.loadCookies(rctx, sess); err != nil {
		s.cfg.Log.Warn("browser: load the saved cookies", "user", user, "err", err)
	}
	return sess, nil
}

// ping waits for the other end of mux to answer.
func ping(ctx context.Context, mux *yamux.Session) error {
	done := make(chan error, 1)
	go func() { _, err := mux.Ping(); done <- err }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxStreams bounds the proxy connections one browser has open at once.
const maxStreams = 256

// acceptProxy serves the streams the sandbox opens: one per connection
// Chromium makes to its proxy, maxStreams at most at once.
func (s *Service) acceptProxy(ctx context.Context, user string, u *userState, mux *yamux.Session) {
	streams := make(chan struct{}, maxStreams)
	for {
		st, err := mux.Accept()
		if err != nil {
			return
		}
		select {
		case streams <- struct{}{}:
		default: // at the cap: a browser needs far fewer
			st.Close()
			continue
		}
		go func(st net.Conn) {
			defer func() { <-streams }()
			var kind [1]byte
			_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(st, kind[:]); err != nil || kind[0] != browserapi.StreamProxy {
				st.Close()
				return
			}
			_ = st.SetReadDeadline(time.Time{})
			s.serveProxy(ctx, user, u, st)
		}(st)
	}
}

// sendFile writes one file into the sandbox's upload directory.
func sendFile(mux *yamux.Session, name string, data []byte) error {
	answer, err := exchange(mux, browserapi.StreamFile, 30*time.Second, 512, []byte(name+"\n"), data)
	if err != nil {
		return err
	}
	if string(answer) != "ok\n" {
		return fmt.Errorf("%w: upload: %s", ErrBrowser, answer)
	}
	return nil
}

// exchange opens a stream of kind, sends parts, half-closes it and reads
// the sandbox's answer (at most limit bytes), all within timeout.
func exchange(mux *yamux.Session, kind byte, timeout time.Duration, limit int64, parts ...[]byte) ([]byte, error) {
	st, err := mux.Open()
	if err != nil {
		return nil, err
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(timeout))
	if _, err := st.Write([]byte{kind}); err != nil {
		return nil, err
	}
	for _, p := range parts {
		if _, err := st.Write(p); err != nil {
			return nil, err
		}
	}
	if err := st.Close(); err != nil { // yamux: a half close; the answer still comes
		return nil, err
	}
	return io.ReadAll(io.LimitReader(st, limit))
}

// closeOrphans closes the tabs an earlier session left (it was paused, or
// the manager restarted): each agent's tab opens again at its last page.
func closeOrphans(ctx context.Context) {
	c := chromedp.FromContext(ctx)
	if c == nil || c.Browser == nil || c.Target == nil {
		return
	}
	infos, err := chromedp.Targets(ctx)
	if err != nil {
		return
	}
	for _, in := range infos {
		if in.Type == "page" && in.TargetID != c.Target.TargetID {
			_, _ = cdp.Call(ctx, c.Browser, target.CloseTarget, target.CloseTargetParams{TargetID: in.TargetID})
		}
	}
}

// maxMessage bounds one CDP message from the sandbox (a screenshot is a
// few megabytes): a compromised sandbox cannot make the manager buffer
// without end.
const maxMessage = 64 << 20

// cappedMessages reads NUL-delimited messages and fails the stream (and
// so the session) when one passes maxMessage.
type cappedMessages struct {
	r     io.Reader
	c     io.Closer
	since int
}

func (m *cappedMessages) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	for _, b := range p[:n] {
		if b == 0 {
			m.since = 0
		} else if m.since++; m.since > maxMessage {
			return 0, fmt.Errorf("a CDP message over %d bytes", maxMessage)
		}
	}
	return n, err
}

func (m *cappedMessages) Close() error { return m.c.Close() }
