package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/browser"
)

// Browser runs the agents' browser actions (manager/browser).
type Browser interface {
	Do(ctx context.Context, user string, req gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, error)
}

// browserAction serves POST /v1/gateway/browser: one action of the
// sandbox's user's browser. A page's own failure is a 502 in the
// manager's words (manager/browser.ErrPage).
func (s *Server) browserAction(w http.ResponseWriter, r *http.Request) error {
	user, status, why := s.caller(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	var req gatewayapi.BrowserRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, gatewayapi.BrowserUploadMax*4/3+64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.More() {
		return problem.New(http.StatusBadRequest, "bad-json", fmt.Sprintf("the body is not a browser request: %v", err))
	}
	page, err := s.Browser.Do(r.Context(), user, req)
	if err != nil {
		return err
	}
	writeJSONStatus(w, http.StatusOK, page)
	return nil
}

// browserProblem is the problem a browser error answers with, nil for
// one it does not know.
func browserProblem(err error) *problem.Error {
	switch {
	case errors.Is(err, browser.ErrBadRequest):
		return problem.New(http.StatusBadRequest, "bad-browser-request", err.Error())
	case errors.Is(err, browser.ErrNoPage):
		return problem.New(http.StatusConflict, "no-page", err.Error())
	case errors.Is(err, browser.ErrOtherSite):
		return problem.New(http.StatusConflict, "other-site", err.Error())
	case errors.Is(err, browser.ErrPassword):
		return problem.New(http.StatusForbidden, "password-field", err.Error())
	case errors.Is(err, browser.ErrNoElement):
		return problem.New(http.StatusNotFound, "no-element", err.Error())
	case errors.Is(err, browser.ErrBusy):
		return problem.New(http.StatusTooManyRequests, "browser-busy", err.Error()).Retry(2)
	case errors.Is(err, browser.ErrPage):
		return problem.New(http.StatusBadGateway, "page-error", err.Error())
	case errors.Is(err, browser.ErrBrowser):
		return problem.New(http.StatusServiceUnavailable, "browser-unavailable", err.Error()).Retry(2)
	}
	return nil
}
