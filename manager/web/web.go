// Package web is the web client: html/template pages and plain JavaScript
// modules, embedded and served by the manager under /app (no npm, no build
// step, no third-party script). Pages render from the store, through the
// same API curl uses (/u/<user>/…, /api/…, /auth/…); one event stream per
// tab (/u/<user>/events) only says what changed. A strict
// Content-Security-Policy allows no inline script.
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"regexp"
	"sort"
	"strings"
)

//go:embed templates/*.html static/*
var files embed.FS

var pages = template.Must(template.ParseFS(files, "templates/*.html"))

// CSP is the Content-Security-Policy of the client's static files: from
// this origin only, no inline script, no framing.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; " +
	"font-src 'self'; manifest-src 'self'; worker-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// pageCSP is a page's policy: only the module the page names with this
// request's nonce runs, and what it imports ('strict-dynamic'); a script
// anywhere else on the origin (under /u/…, say) does not.
func pageCSP(nonce string) string {
	return strings.Replace(CSP, "script-src 'self'", "script-src 'nonce-"+nonce+"' 'strict-dynamic'", 1)
}

// Sessions says whose a session cookie is (registry.ErrUnauthenticated, or
// any error, for none); r is the request that carries it, whose address
// counts its failures.
type Sessions interface {
	UserForSession(r *http.Request, token string) (string, error)
}

// Handler serves the web client.
type Handler struct {
	Sessions Sessions
	Cookie   string // the session cookie's name
	Log      *slog.Logger
}

// Register adds the web client's routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /app", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/app/", http.StatusFound)
	})
	mux.HandleFunc("GET /app/{$}", h.app)
	mux.HandleFunc("GET /app/sign-in", h.signIn)
	mux.HandleFunc("GET /app/static/{name}", func(w http.ResponseWriter, r *http.Request) {
		serveStatic(w, r, r.PathValue("name"))
	})
	mux.HandleFunc("GET /app/manifest.webmanifest", func(w http.ResponseWriter, r *http.Request) {
		serveStatic(w, r, "manifest.webmanifest")
	})
	// The service worker is served from /app/ so that its scope is the
	// whole client.
	mux.HandleFunc("GET /app/sw.js", func(w http.ResponseWriter, r *http.Request) {
		serveStatic(w, r, "sw.js")
	})
}

// headers sets what every response of the web client carries.
func headers(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", CSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("X-Frame-Options", "DENY")
}

// modules are the modules main.js needs before it runs: its static
// imports and theirs, preloaded by the page so the browser fetches them at
// once, not one import after another. The other pages' modules (pages.js,
// agents.js and what they import) are import()ed when their page opens,
// so a cold load of the conversation carries none of them.
var modules = func() []string {
	seen := map[string]bool{}
	var walk func(name string)
	walk = func(name string) {
		src, _ := fs.ReadFile(files, "static/"+name)
		for _, m := range staticImport.FindAllSubmatch(src, -1) {
			if n := string(m[1]); !seen[n] {
				seen[n] = true
				walk(n)
			}
		}
	}
	walk("main.js")
	m := make([]string, 0, len(seen))
	for n := range seen {
		m = append(m, n)
	}
	sort.Strings(m)
	return m
}()

// staticImport finds a module's static imports (import … from './x.js').
var staticImport = regexp.MustCompile(`(?m)^import [^;]*? from '\./([a-z-]+\.js)';`)

// asset is a static file as it is served: its bytes, gzipped once, and an
// ETag of its content, so a reload asks "still this?" and gets a 304.
type asset struct {
	plain, gz   []byte
	etag, ctype string
}

// assets are the static files, read and compressed once at start.
var assets = func() map[string]asset {
	m := map[string]asset{}
	entries, _ := fs.ReadDir(files, "static")
	for _, e := range entries {
		b, _ := files.ReadFile("static/" + e.Name())
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(b)
		_ = zw.Close()
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(e.Name()))
		switch path.Ext(e.Name()) {
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".webmanifest":
			ctype = "application/manifest+json"
		case ".svg":
			ctype = "image/svg+xml"
		}
		m[e.Name()] = asset{plain: b, gz: buf.Bytes(), ctype: ctype,
			etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`}
	}
	return m
}()

// serveStatic answers with one static file: gzipped when the client takes
// it, revalidated by its ETag (no-cache: the browser keeps it but asks each
// load; an unchanged file costs a 304 without a body).
func serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	headers(w)
	a, ok := assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", a.etag)
	w.Header().Set("Vary", "Accept-Encoding")
	if inm := r.Header.Get("If-None-Match"); inm != "" && strings.Contains(inm, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.plain
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		body = a.gz
	}
	_, _ = w.Write(body)
}

// acceptsGzip says whether the request's Accept-Encoding takes gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

func (h *Handler) user(r *http.Request) string {
	c, err := r.Cookie(h.Cookie)
	if err != nil || c.Value == "" {
		return ""
	}
	user, err := h.Sessions.UserForSession(r, c.Value)
	if err != nil {
		return ""
	}
	return user
}

func (h *Handler) render(w http.ResponseWriter, name string, data map[string]any) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	if data == nil {
		data = map[string]any{}
	}
	nonce := base64.RawURLEncoding.EncodeToString(b) // nothing html/template would escape
	data["Nonce"] = nonce
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	headers(w)
	w.Header().Set("Content-Security-Policy", pageCSP(nonce))
	if err := pages.ExecuteTemplate(w, name, data); err != nil && !errors.Is(err, http.ErrHandlerTimeout) {
		h.Log.Error("web: render", "page", name, "err", err)
	}
}

// app is the client's shell, for a signed-in user; others go to sign-in.
func (h *Handler) app(w http.ResponseWriter, r *http.Request) {
	user := h.user(r)
	if user == "" {
		http.Redirect(w, r, "/app/sign-in", http.StatusFound)
		return
	}
	h.render(w, "app.html", map[string]any{"User": user, "Modules": modules})
}

func (h *Handler) signIn(w http.ResponseWriter, r *http.Request) {
	if h.user(r) != "" {
		http.Redirect(w, r, "/app/", http.StatusFound)
		return
	}
	h.render(w, "sign-in.html", nil)
}
