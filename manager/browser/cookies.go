package browser

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/chromedp"

	"github.com/affido/affido/internal/browserapi"
)

// cookie is one cookie as the sandbox keeps it (browserapi.CookieFile).
type cookie struct {
	Name     string  `json:"name"`
	Value    string  `json:"value"`
	Domain   string  `json:"domain"`
	Path     string  `json:"path"`
	Expires  float64 `json:"expires,omitempty"` // seconds since the epoch; 0 for a session cookie
	HTTPOnly bool    `json:"http_only,omitempty"`
	Secure   bool    `json:"secure,omitempty"`
	SameSite string  `json:"same_site,omitempty"`
}

// saveCookies hands the sandbox the browser's cookies when they changed
// since the last save, so a sign-in outlives a kill of the sandbox
// (Chromium writes its own store only now and then).
func (s *Service) saveCookies(ctx context.Context, sess *session) error {
	res, err := cdp.Call(ctx, chromedp.FromContext(sess.root).Browser, storage.GetCookies, storage.GetCookiesParams{})
	if err != nil {
		return err
	}
	list := make([]cookie, 0, len(res.Cookies))
	for _, c := range res.Cookies {
		k := cookie{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path, HTTPOnly: c.HTTPOnly, Secure: c.Secure, SameSite: string(c.SameSite)}
		if !c.Session && c.Expires > 0 {
			k.Expires = c.Expires
		}
		list = append(list, k)
	}
	raw, _ := json.Marshal(list)
	sum := sha256.Sum256(raw)
	if sum == sess.cookies {
		return nil
	}
	answer, err := exchange(sess.mux, browserapi.StreamSaveCookies, 10*time.Second, 512, raw)
	if err != nil {
		return err
	}
	if string(answer) != "ok\n" {
		return fmt.Errorf("save cookies: %s", answer)
	}
	sess.cookies = sum
	return nil
}

// loadCookies gives a freshly started browser the cookies last saved.
func (s *Service) loadCookies(ctx context.Context, sess *session) error {
	raw, err := exchange(sess.mux, browserapi.StreamLoadCookies, 10*time.Second, browserapi.MaxCookies)
	if err != nil || len(raw) == 0 {
		return err
	}
	var list []cookie
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("saved cookies: %w", err)
	}
	params := make([]*network.CookieParam, 0, len(list))
	now := float64(time.Now().Unix())
	for _, c := range list {
		if c.Expires != 0 && c.Expires < now {
			continue
		}
		p := &network.CookieParam{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path, HTTPOnly: c.HTTPOnly, Secure: c.Secure,
			SameSite: network.CookieSameSite(c.SameSite)}
		if c.Expires != 0 {
			p.Expires = cdp.TimeSinceEpoch(c.Expires)
		}
		params = append(params, p)
	}
	if len(params) == 0 {
		return nil
	}
	_, err = cdp.Call(ctx, chromedp.FromContext(sess.root).Browser, storage.SetCookies, storage.SetCookiesParams{Cookies: params})
	if err == nil {
		sess.cookies = sha256.Sum256(raw)
	}
	return err
}
