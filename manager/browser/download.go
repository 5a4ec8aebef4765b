package browser

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/yamux"

	"github.com/affido/affido/internal/browserapi"
	"github.com/affido/affido/internal/gatewayapi"
)

// Downloads: a page may download files; Chromium keeps each in the
// browser sandbox's DownloadDir, named by its id, and the manager lists
// them in every action's result. A file reaches the workspace only
// through browser_save_download, which always asks the owner.

// maxDownloads is how many downloads a session remembers (the newest).
const maxDownloads = 10

// downloads are one session's, filled by the browser's events. Each is
// the tab's whose top frame started it (a frame's id is its target's): an
// agent sees and saves only its own tab's, never another agent's.
type downloads struct {
	mu   sync.Mutex
	list []download
	// cancel stops a download past MaxDownload (set by allowDownloads).
	cancel func(id string)
}

type download struct {
	gatewayapi.BrowserDownload
	frame string
}

func (d *downloads) begin(ev *cdpbrowser.EventDownloadWillBegin) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.list = append(d.list, download{gatewayapi.BrowserDownload{ID: ev.GUID, Name: safeName(ev.SuggestedFilename), URL: capText(ev.URL, 500), State: "inProgress"}, string(ev.FrameID)})
	if len(d.list) > maxDownloads {
		d.list = d.list[len(d.list)-maxDownloads:]
	}
}

func (d *downloads) progress(ev *cdpbrowser.EventDownloadProgress) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.list {
		if d.list[i].ID != ev.GUID {
			continue
		}
		d.list[i].Size = int64(ev.ReceivedBytes)
		d.list[i].State = string(ev.State)
		if d.list[i].State == "too_large" {
			continue // for good
		}
		if ev.ReceivedBytes > browserapi.MaxDownload || ev.TotalBytes > browserapi.MaxDownload {
			// Past the bound: never saved; stopped if it still runs (a fast
			// one may be complete already).
			d.list[i].State = "too_large"
			if ev.State == cdpbrowser.DownloadProgressStateInProgress && d.cancel != nil {
				go d.cancel(ev.GUID) // not in the listener: it must not wait for the browser
			}
		}
	}
}

// of returns tab's downloads (frame: its target's id).
func (d *downloads) of(frame string) []gatewayapi.BrowserDownload {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []gatewayapi.BrowserDownload
	for _, x := range d.list {
		if x.frame == frame {
			out = append(out, x.BrowserDownload)
		}
	}
	return out
}

func (d *downloads) get(frame, id string) (gatewayapi.BrowserDownload, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.list {
		if x.ID == id && x.frame == frame {
			return x.BrowserDownload, true
		}
	}
	return gatewayapi.BrowserDownload{}, false
}

// frameOf is a tab's top frame's id ("" for none).
func frameOf(t *tab) string {
	if t == nil {
		return ""
	}
	if c := chromedp.FromContext(t.ctx); c != nil && c.Target != nil {
		return string(c.Target.TargetID)
	}
	return ""
}

// allowDownloads has Chromium save downloads into DownloadDir under their
// ids and report them (the events fill sess.downloads).
func allowDownloads(ctx context.Context, d *downloads) error {
	d.cancel = func(id string) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = chromedp.Do(cctx, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := cdp.Call(ctx, chromedp.FromContext(ctx).Browser, cdpbrowser.CancelDownload, cdpbrowser.CancelDownloadParams{GUID: id})
			return err
		}))
	}
	if err := chromedp.ListenBrowser(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *cdpbrowser.EventDownloadWillBegin:
			d.begin(ev)
		case *cdpbrowser.EventDownloadProgress:
			d.progress(ev)
		}
	}); err != nil {
		return err
	}
	yes := true
	return chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := cdp.Call(ctx, chromedp.FromContext(ctx).Browser, cdpbrowser.SetDownloadBehavior,
			cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName,
				DownloadPath: browserapi.DownloadDir, EventsEnabled: &yes})
		return err
	}))
}

// saveDownload reads a finished download of tab's out of the sandbox.
func saveDownload(sess *session, t *tab, id string) (gatewayapi.BrowserPage, error) {
	d, ok := sess.downloads.get(frameOf(t), id)
	if !ok || t == nil {
		return gatewayapi.BrowserPage{}, fmt.Errorf("%w: no download %q of your tab in this browser session (the list is in the last action's result)", ErrNoElement, id)
	}
	if d.State != "completed" {
		return gatewayapi.BrowserPage{}, fmt.Errorf("%w: download %s is %s, not completed", ErrBadRequest, id, d.State)
	}
	data, err := readDownload(sess.mux, id)
	if err != nil {
		return gatewayapi.BrowserPage{}, fmt.Errorf("%w: read the download: %v", ErrBrowser, err)
	}
	return gatewayapi.BrowserPage{File: data, FileName: d.Name}, nil
}

func readDownload(mux *yamux.Session, id string) ([]byte, error) {
	st, err := mux.Open()
	if err != nil {
		return nil, err
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := st.Write(append([]byte{browserapi.StreamDownload}, id+"\n"...)); err != nil {
		return nil, err
	}
	r := bufio.NewReader(st)
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	size, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "ok ")
	if !ok {
		return nil, fmt.Errorf("the sandbox: %s", capText(strings.TrimSpace(line), 200))
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n < 0 || n > browserapi.MaxDownload {
		return nil, fmt.Errorf("the sandbox said a size of %q", size)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, err
	}
	return data, nil
}

// safeName is a page's suggested file name made a plain base name.
func safeName(s string) string {
	s = path.Base(strings.ReplaceAll(s, "\\", "/"))
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '/' {
			return -1
		}
		return r
	}, s)
	s = strings.TrimLeft(s, ".")
	if s == "" {
		s = "download"
	}
	return capText(s, 120)
}

// capText cuts s to at most n bytes, dropping a rune cut in two.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
