package web

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

type sessions map[string]string

func (s sessions) UserForSession(_ *http.Request, tok string) (string, error) {
	if u, ok := s[tok]; ok {
		return u, nil
	}
	return "", errors.New("unauthenticated")
}

func server(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	(&Handler{Sessions: sessions{"good": "alice"}, Cookie: "c", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Register(mux)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func get(t *testing.T, s *httptest.Server, path, cookie string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+path, nil)
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: "c", Value: cookie})
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestPagesNeedASessionAndCarryTheCSP(t *testing.T) {
	s := server(t)
	for _, c := range []struct{ path, cookie, location string }{
		{"/app/", "", "/app/sign-in"},
		{"/app/", "expired", "/app/sign-in"},
		{"/app", "", "/app/"},
		{"/app/sign-in", "good", "/app/"},
	} {
		if resp, _ := get(t, s, c.path, c.cookie); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != c.location {
			t.Errorf("%s (cookie %q): %d to %q, want %q", c.path, c.cookie, resp.StatusCode, resp.Header.Get("Location"), c.location)
		}
	}
	resp, body := get(t, s, "/app/", "good")
	csp := resp.Header.Get("Content-Security-Policy")
	nonce := regexp.MustCompile(`'nonce-([A-Za-z0-9_-]+)' 'strict-dynamic'`).FindStringSubmatch(csp)
	if resp.StatusCode != 200 || !strings.Contains(body, `data-user="alice"`) || nonce == nil || !strings.Contains(body, `nonce="`+nonce[1]+`"`) {
		t.Fatalf("app: %d %v", resp.StatusCode, resp.Header)
	}
	if _, again := get(t, s, "/app/", "good"); strings.Contains(again, `nonce="`+nonce[1]+`"`) {
		t.Fatal("the nonce is the same on two loads")
	}
	if !strings.Contains(CSP, "script-src 'self'") || strings.Contains(CSP, "unsafe") {
		t.Fatalf("CSP %q", CSP)
	}
	resp, _ = get(t, s, "/app/static/main.js", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") || resp.Header.Get("Content-Security-Policy") != CSP {
		t.Fatalf("main.js: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := get(t, s, "/app/manifest.webmanifest", ""); resp.StatusCode != 200 {
		t.Fatalf("manifest: %d", resp.StatusCode)
	}
}

// No page has inline script or event-handler attributes (the CSP would
// block them; this keeps them from being written), and no module builds
// markup from strings.
func TestNoInlineScriptNoInnerHTML(t *testing.T) {
	inline := regexp.MustCompile(`(?i)<script(?:\s+type="module")?\s*>|\son[a-z]+\s*=|javascript:`)
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := files.ReadFile(p)
		if strings.HasSuffix(p, ".html") && inline.Match(b) {
			t.Errorf("%s has inline script: %s", p, inline.Find(b))
		}
		// markup.js alone puts HTML into the page: the manager's rendering
		// of a reply, sanitized there (manager/markdown); once, in one place.
		builds := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function|DOMParser|createContextualFragment|setHTML`)
		if n := len(builds.FindAll(b, -1)); strings.HasSuffix(p, ".js") && n > 0 && !(p == "static/markup.js" && n == 1) {
			t.Errorf("%s builds markup or code from strings (%d places)", p, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Static files go out gzipped to a client that takes it, plain to one
// that does not, and a reload with the ETag gets a 304 without a body.
func TestStaticFilesAreCompressedAndRevalidated(t *testing.T) {
	s := server(t)
	do := func(path string, h map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+path, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	plainResp, plain := do("/app/static/main.js", nil)
	if plainResp.StatusCode != 200 || plainResp.Header.Get("Content-Encoding") != "" || !strings.Contains(string(plain), "import") {
		t.Fatalf("plain main.js: %d %v", plainResp.StatusCode, plainResp.Header)
	}
	gzResp, gz := do("/app/static/main.js", map[string]string{"Accept-Encoding": "br, gzip;q=0.8"})
	if gzResp.Header.Get("Content-Encoding") != "gzip" || gzResp.Header.Get("Vary") != "Accept-Encoding" || len(gz) >= len(plain) {
		t.Fatalf("gzipped main.js: %v, %d bytes of %d", gzResp.Header, len(gz), len(plain))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if un, _ := io.ReadAll(zr); !bytes.Equal(un, plain) {
		t.Fatal("the gzipped body is not the file")
	}
	if resp, _ := do("/app/static/main.js", map[string]string{"Accept-Encoding": "gzip;q=0"}); resp.Header.Get("Content-Encoding") != "" {
		t.Fatal("gzip;q=0 still got gzip")
	}
	etag := plainResp.Header.Get("ETag")
	if etag == "" || plainResp.Header.Get("Cache-Control") != "no-cache" || plainResp.Header.Get("Content-Security-Policy") != CSP {
		t.Fatalf("headers %v", plainResp.Header)
	}
	if resp, b := do("/app/static/main.js", map[string]string{"If-None-Match": etag}); resp.StatusCode != http.StatusNotModified || len(b) != 0 {
		t.Fatalf("revalidation: %d, %d bytes", resp.StatusCode, len(b))
	}
	if resp, _ := do("/app/static/app.css", map[string]string{"If-None-Match": etag}); resp.StatusCode != 200 {
		t.Fatalf("another file's ETag matched app.css: %d", resp.StatusCode)
	}
	for _, c := range []struct{ path, ctype string }{
		{"/app/static/app.css", "text/css"}, {"/app/manifest.webmanifest", "application/manifest+json"}, {"/app/sw.js", "text/javascript"},
	} {
		if resp, _ := do(c.path, nil); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) {
			t.Errorf("%s: %d %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	for _, p := range []string{"/app/static/nope.js", "/app/static/../web.go", "/app/static/"} {
		if resp, _ := do(p, nil); resp.StatusCode != 404 && resp.StatusCode != 301 && resp.StatusCode != 307 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}

// The page preloads every module main.js needs before it runs (its static
// imports, and theirs), with the page's nonce, so they load at once rather
// than one import after another; the other pages' modules are not part of
// a cold load of the conversation.
func TestThePagePreloadsItsModules(t *testing.T) {
	s := server(t)
	_, body := get(t, s, "/app/", "good")
	nonce := regexp.MustCompile(`<script type="module" nonce="([^"]+)"`).FindStringSubmatch(body)
	if nonce == nil {
		t.Fatal("no module script")
	}
	preload := func(m string) string {
		return `<link rel="modulepreload" nonce="` + nonce[1] + `" href="/app/static/` + m + `">`
	}
	main, _ := files.ReadFile("static/main.js")
	imported := regexp.MustCompile(`from '\./([a-z-]+\.js)'`).FindAllSubmatch(main, -1)
	if len(imported) < 4 {
		t.Fatalf("main.js imports %d modules", len(imported))
	}
	for _, m := range imported {
		if !strings.Contains(body, preload(string(m[1]))) {
			t.Errorf("not preloaded: %s", m[1])
		}
	}
	for _, m := range []string{"markup.js"} { // render.js's import
		if !strings.Contains(body, preload(m)) {
			t.Errorf("not preloaded: %s", m)
		}
	}
	for _, m := range []string{"pages.js", "agents.js", "connectors.js", "push.js", "takeover.js"} {
		if strings.Contains(body, preload(m)) {
			t.Errorf("preloaded, though only another page needs it: %s", m)
		}
	}
}
