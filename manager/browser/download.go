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

// downloads are one session's, filled by the browser's events.
type downloads struct {
	mu   sync.Mutex
	list []gatewayapi.BrowserDownload
}

func (d *downloads) begin(ev *cdpbrowser.EventDownloadWillBegin) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.list = append(d.list, gatewayapi.BrowserDownload{ID: ev.GUID, Name: safeName(ev.SuggestedFilename), URL: capText(ev.URL, 500), State: "inProgress"})
	if len(d.list) > maxDownloads {
		d.list = d.list[len(d.list)-maxDownloads:]
	}
}

func (d *downloads) progress(ev *cdpbrowser.EventDownloadProgress) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.list {
		if d.list[i].ID == ev.GUID {
			d.list[i].Size = int64(ev.ReceivedBytes)
			d.list[i].State = string(ev.State)
		}
	}
}

func (d *downloads) all() []gatewayapi.BrowserDownload {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]gatewayapi.BrowserDownload(nil), d.list...)
}

func (d *downloads) get(id string) (gatewayapi.BrowserDownload, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.list {
		if x.ID == id {
			return x, true
		}
	}
	return gatewayapi.BrowserDownload{}, false
}

// allowDownloads has Chromium save downloads into DownloadDir under their
// ids and report them (the events fill sess.downloads).
func allowDownloads(ctx context.Context, d *downloads) error {
	_ = chromedp.ListenBrowser(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *cdpbrowser.EventDownloadWillBegin:
			d.begin(ev)
		case *cdpbrowser.EventDownloadProgress:
			d.progress(ev)
		}
	})
	yes := true
	return chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := cdp.Call(ctx, chromedp.FromContext(ctx).Browser, cdpbrowser.SetDownloadBehavior,
			cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName,
				DownloadPath: browserapi.DownloadDir, EventsEnabled: &yes})
		return err
	}))
}

// saveDownload reads a finished download out of the sandbox.
func saveDownload(sess *session, id string) (gatewayapi.BrowserPage, error) {
	d, ok := sess.downloads.get(id)
	if !ok {
		return gatewayapi.BrowserPage{}, fmt.Errorf("%w: no download %q in this browser session (the list is in the last action's result)", ErrNoElement, id)
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
	if err != nil || n < 0 || n > browserapi.MaxUpload {
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

// capText cuts s to at most n bytes, on a rune boundary.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
