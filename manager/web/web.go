// Package web is the web client: html/template pages and plain JavaScript
// modules, embedded and served by the manager under /app (no npm, no build
// step, no third-party script). Pages render from the store, through the
// same API curl uses (/u/<user>/…, /api/…, /auth/…); one event stream per
// tab (/u/<user>/events) only says what changed. A strict
// Content-Security-Policy allows no inline script.
package web

import (
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
)

//go:embed templates/*.html static/*
var files embed.FS

var pages = template.Must(template.ParseFS(files, "templates/*.html"))

// CSP is the Content-Security-Policy of the client's static files: from
// this origin only, no inline script, no framing.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; manifest-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

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
	static, _ := fs.Sub(files, "static")
	fileServer := http.StripPrefix("/app/static/", http.FileServerFS(static))
	mux.Handle("GET /app/static/", secure(fileServer))
	mux.Handle("GET /app/manifest.webmanifest", secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/manifest+json")
		b, _ := files.ReadFile("static/manifest.webmanifest")
		_, _ = w.Write(b)
	})))
}

// headers sets what every response of the web client carries.
func headers(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", CSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("X-Frame-Options", "DENY")
}

// secure serves static files with the client's headers.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		if strings.HasSuffix(r.URL.Path, ".js") {
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		}
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
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

func (h *Handler) render(w http.ResponseWriter, name string, data map[string]string) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	if data == nil {
		data = map[string]string{}
	}
	data["Nonce"] = base64.RawURLEncoding.EncodeToString(b) // nothing html/template would escape
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	headers(w)
	w.Header().Set("Content-Security-Policy", pageCSP(data["Nonce"]))
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
	h.render(w, "app.html", map[string]string{"User": user})
}

func (h *Handler) signIn(w http.ResponseWriter, r *http.Request) {
	if h.user(r) != "" {
		http.Redirect(w, r, "/app/", http.StatusFound)
		return
	}
	h.render(w, "sign-in.html", nil)
}
