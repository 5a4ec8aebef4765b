package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/manager/lifecycle"
)

// instantResolver answers at once, as lifecycle does for a running sandbox.
type instantResolver struct{}

func (instantResolver) Touch(string, bool) {}

func (instantResolver) Resolve(context.Context, string, bool) (netip.AddrPort, error) {
	return warmEndpoint, nil
}

var warmEndpoint = netip.MustParseAddrPort("10.213.0.2:8080")

// countingLookups is fakeAuth counting the lookups that would go to Postgres.
type countingLookups struct {
	fakeAuth
	n atomic.Int64
}

func (c *countingLookups) UserForSession(ctx context.Context, tok string) (string, time.Time, error) {
	c.n.Add(1)
	return c.fakeAuth.UserForSession(ctx, tok)
}

func (c *countingLookups) UserForAPIToken(ctx context.Context, tok string) (string, error) {
	c.n.Add(1)
	return c.fakeAuth.UserForAPIToken(ctx, tok)
}

// discardWriter is a ResponseWriter that keeps only the header map.
type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }

// BenchmarkResolveWarm is forward_auth for a running sandbox: a known
// credential, the owner's path, a Resolver that answers at once, the cache
// and token use as the manager runs them. lookups/op counts the credential
// lookups that would each be a Postgres round trip (and, for an API token
// before the batched write, a write).
func BenchmarkResolveWarm(b *testing.B) {
	for _, c := range []struct{ name, header, value string }{
		{"session", "Cookie", SessionCookie + "=s-alice"},
		{"bearer", "Authorization", "Bearer t-alice"},
	} {
		b.Run(c.name, func(b *testing.B) {
			auth := &countingLookups{fakeAuth: fakeAuth{sessions: map[string]string{"s-alice": "alice"}, tokens: map[string]string{"t-alice": "alice"}}}
			s := &Server{EdgeDeps: EdgeDeps{Auth: auth, Resolver: instantResolver{}, Metrics: lifecycle.NewMetrics(func() map[string]int { return nil }), Credentials: NewCredentialCache(time.Second), TokenUse: NewTokenUse(&touches{}, nil)}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			h := s.Handler()
			newReq := func() *http.Request {
				r := httptest.NewRequest("GET", "/v1/resolve?user=alice&path=/prompt", nil)
				r.Header.Set(c.header, c.value)
				r.Header.Set("X-Forwarded-For", "192.0.2.7")
				r.Header.Set("X-Forwarded-Method", "GET")
				return r
			}
			b.Run("serial", func(b *testing.B) {
				r, w := newReq(), &discardWriter{h: http.Header{}}
				auth.n.Store(0)
				b.ReportAllocs()
				for b.Loop() {
					clear(w.h)
					h.ServeHTTP(w, r)
					if w.code != http.StatusOK {
						b.Fatalf("status %d", w.code)
					}
				}
				b.ReportMetric(float64(auth.n.Load())/float64(b.N), "lookups/op")
			})
			b.Run("parallel", func(b *testing.B) {
				auth.n.Store(0)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					r, w := newReq(), &discardWriter{h: http.Header{}}
					for pb.Next() {
						clear(w.h)
						h.ServeHTTP(w, r)
						if w.code != http.StatusOK {
							b.Errorf("status %d", w.code)
							return
						}
					}
				})
				b.ReportMetric(float64(auth.n.Load())/float64(b.N), "lookups/op")
			})
		})
	}
}
