package web

import (
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
		if strings.HasSuffix(p, ".js") && regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function`).Match(b) {
			t.Errorf("%s builds markup or code from strings", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
