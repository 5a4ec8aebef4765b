package browser

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	cdpbrowser "github.com/chromedp/cdproto/browser"
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
	for i := range maxDownloads + 5 {
		d.begin(&cdpbrowser.EventDownloadWillBegin{GUID: fmt.Sprint(i), SuggestedFilename: "f"})
	}
	d.progress(&cdpbrowser.EventDownloadProgress{GUID: "14", ReceivedBytes: 7, State: cdpbrowser.DownloadProgressStateCompleted})
	all := d.all()
	if len(all) != maxDownloads || all[0].ID != "5" || all[len(all)-1].State != "completed" || all[len(all)-1].Size != 7 {
		t.Fatalf("downloads: %+v", all)
	}
	if _, ok := d.get("0"); ok {
		t.Fatal("the oldest download is still listed")
	}
}
