package gateway

import (
	"io"
	"net/http"
	"os"
	"path"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/marketplace"
)

// Marketplace serves the built marketplace (affido marketplace build) to
// sandboxes: the index, each version's manifest, and its files.
type Marketplace struct {
	Dir    string
	Caller Caller
}

// Register adds the marketplace routes to mux.
func (m *Marketplace) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.MarketplacePath+"/index.json", m.serve(func(r *http.Request) (string, bool) {
		return "index.json", true
	}))
	mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.MarketplacePath+"/{name}/{version}/manifest.json", m.serve(func(r *http.Request) (string, bool) {
		n, v := r.PathValue("name"), r.PathValue("version")
		return path.Join(n, v, "manifest.json"), marketplace.ValidName(n) && marketplace.ValidVersion(v)
	}))
	mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.MarketplacePath+"/{name}/{version}/files/{path...}", m.serve(func(r *http.Request) (string, bool) {
		n, v, p := r.PathValue("name"), r.PathValue("version"), r.PathValue("path")
		return path.Join(n, v, "files", p), marketplace.ValidName(n) && marketplace.ValidVersion(v) && marketplace.CheckPath(p) == nil
	}))
}

func (m *Marketplace) serve(target func(*http.Request) (string, bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, status, why := m.Caller(r); status != 0 {
			problem.Write(w, status, "gateway-auth", why)
			return
		}
		p, ok := target(r)
		if !ok {
			problem.Write(w, http.StatusBadRequest, "bad-skill-path", "malformed skill name, version or path")
			return
		}
		root, err := os.OpenRoot(m.Dir)
		if err != nil {
			problem.Write(w, http.StatusServiceUnavailable, "no-marketplace", "the marketplace is not built")
			return
		}
		defer root.Close()
		f, err := root.Open(p)
		if err != nil {
			problem.Write(w, http.StatusNotFound, "unknown-skill", "no such skill, version or file")
			return
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || st.IsDir() {
			problem.Write(w, http.StatusNotFound, "unknown-skill", "no such skill, version or file")
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.Copy(w, io.LimitReader(f, marketplace.MaxSkillSize))
	}
}
