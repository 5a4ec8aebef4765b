package browser

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
)

// A page's suggested name is made a plain base name (tried: a path out,
// a backslash path, a hidden file, control characters, nothing, a long
// name cut inside a rune), and a session remembers its newest downloads
// only.
func TestDownloadNamesArePlainAndFew(t *testing.T) {
	for in, want := range map[string]string{
		"../../etc/passwd": "passwd", `..\..\boot.ini`: "boot.ini", ".bashrc": "bashrc",
		"a\x00b\nc.txt": "abc.txt", "": "download", "..": "download", "Q3 report.csv": "Q3 report.csv",
	} {
		if got := safeName(in); got != want {
			t.Errorf("safeName(%q) = %q, want %q", in, got, want)
		}
	}
	long := safeName(strings.Repeat("é", 100))
	if len(long) > 120 || !utf8.ValidString(long) {
		t.Errorf("a long name: %d bytes, valid %v", len(long), utf8.ValidString(long))
	}
	var d downloads
	cancelled := make(chan string, 1)
	d.cancel = func(id string) { cancelled <- id }
	for i := range maxDownloads + 5 {
		d.begin(&cdpbrowser.EventDownloadWillBegin{GUID: fmt.Sprint(i), SuggestedFilename: "f", FrameID: cdp.FrameID([]string{"tab-a", "tab-b"}[i%2])})
	}
	d.progress(&cdpbrowser.EventDownloadProgress{GUID: "14", ReceivedBytes: 7, State: cdpbrowser.DownloadProgressStateCompleted})
	a, b := d.of("tab-a"), d.of("tab-b")
	if len(a)+len(b) != maxDownloads || a[0].ID != "6" || b[0].ID != "5" || a[len(a)-1].State != "completed" || a[len(a)-1].Size != 7 {
		t.Fatalf("downloads: %+v %+v", a, b)
	}
	if _, ok := d.get("tab-a", "0"); ok {
		t.Fatal("the oldest download is still listed")
	}
	// One tab's download is not another's to save.
	if _, ok := d.get("tab-b", "14"); ok {
		t.Fatal("tab b got tab a's download")
	}
	if _, ok := d.get("tab-a", "14"); !ok {
		t.Fatal("tab a lost its download")
	}
	// Past the bound a download is cancelled, and listed so.
	d.progress(&cdpbrowser.EventDownloadProgress{GUID: "13", ReceivedBytes: 5 << 20, TotalBytes: 9 << 20, State: cdpbrowser.DownloadProgressStateInProgress})
	d.progress(&cdpbrowser.EventDownloadProgress{GUID: "13", ReceivedBytes: 9 << 20, TotalBytes: 9 << 20, State: cdpbrowser.DownloadProgressStateCompleted})
	if x, _ := d.get("tab-b", "13"); x.State != "too_large" {
		t.Fatalf("a download past the bound: %+v", x)
	}
	select {
	case id := <-cancelled:
		if id != "13" {
			t.Fatalf("cancelled %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the download past the bound was not cancelled in the browser")
	}
}
