package server

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/agentdb"
	"github.com/affido/affido/manager/connectors"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/spend"
)

// handlerFunc is a route that returns its failure for fail to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts h to net/http: an error it returns is answered by fail.
func handle(log *slog.Logger, h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			fail(w, r, log, err)
		}
	}
}

// fail answers err: the one place the manager's errors become problems. A
// *problem.Error answers as it says; the sentinel errors below answer
// with the problem the client can act on; anything else is a 500 carrying
// only a request id, under which the error is logged.
func fail(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if p := problemOf(err); p != nil {
		err = p
	}
	problem.Respond(w, r, log, err)
}

// problemOf is the problem err answers with, nil for an internal error.
func problemOf(err error) *problem.Error {
	var p *problem.Error
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, ErrCrossSite):
		return problem.New(http.StatusForbidden, "cross-site", err.Error())
	case errors.Is(err, account.ErrWeakPassword):
		return problem.Errorf(http.StatusBadRequest, "bad-password", "a password is %d to %d bytes", account.MinPassword, account.MaxPassword)
	case errors.Is(err, registry.ErrBadInvite): // the spent token stays spent
		return problem.New(http.StatusForbidden, "bad-invite", "the invite is unknown, used, expired or for another user")
	case errors.Is(err, registry.ErrUserExists):
		return problem.New(http.StatusConflict, "user-exists", "that user name is taken")
	case errors.Is(err, spend.ErrAlreadyRaised):
		return problem.New(http.StatusConflict, "already-raised", "today's limit was raised once already; it resets tomorrow")
	case errors.Is(err, connectors.ErrNotFound):
		return problem.New(http.StatusNotFound, "connector-not-found", "no such connector")
	case errors.Is(err, connectors.ErrExists):
		return problem.New(http.StatusConflict, "connector-exists", "that agent has a connector of that name")
	case errors.Is(err, connectors.ErrInvalid):
		return problem.New(http.StatusBadRequest, "bad-connector", err.Error())
	case errors.Is(err, connectors.ErrNoTool):
		return problem.New(http.StatusNotFound, gatewayapi.ProblemConnectorNoTool, "no such connector tool for this agent")
	case errors.Is(err, connectors.ErrChanged):
		return problem.New(http.StatusConflict, gatewayapi.ProblemConnectorChanged,
			"the tool's definition changed on its server since the owner set it, so it is off until the owner sets it again")
	case errors.Is(err, connectors.ErrOff):
		return problem.New(http.StatusForbidden, gatewayapi.ProblemConnectorOff, "the owner has set this tool off")
	case errors.Is(err, connectors.ErrStricter):
		return problem.New(http.StatusConflict, gatewayapi.ProblemConnectorAsks, "the owner now wants to be asked before this tool runs")
	case errors.Is(err, connectors.ErrTimeout):
		return problem.New(http.StatusGatewayTimeout, gatewayapi.ProblemConnectorTimeout, err.Error())
	case errors.Is(err, connectors.ErrTooLarge):
		return problem.New(http.StatusBadGateway, gatewayapi.ProblemConnectorTooLarge, err.Error())
	case errors.Is(err, connectors.ErrServer):
		return problem.New(http.StatusBadGateway, gatewayapi.ProblemConnectorFailed, err.Error())
	case errors.Is(err, agentdb.ErrNotOffered):
		return problem.New(http.StatusNotFound, "no-storage", err.Error()+" (affido admin migrate-storage moves them there)")
	case errors.Is(err, agentdb.ErrNotUpgrade):
		return problem.New(http.StatusBadRequest, "not-upgrade", err.Error())
	case errors.Is(err, agentdb.ErrTooManyTunnels):
		return problem.New(http.StatusTooManyRequests, "too-many-connections", err.Error()).Retry(1)
	case browserProblem(err) != nil:
		return browserProblem(err)
	case errors.Is(err, outbound.ErrBadURL):
		return problem.New(http.StatusBadRequest, "bad-url", "the notification URL must be an http or https URL")
	case errors.Is(err, outbound.ErrRefused):
		return problem.New(http.StatusBadRequest, "url-refused", "that URL leads to an address notifications may not reach (loopback, private, the control network, the sandbox pool)")
	}
	return nil
}

// registryDown is the answer to the registry (Postgres) failing: 503,
// try again shortly; why is logged.
func registryDown(err error) error {
	return problem.New(http.StatusServiceUnavailable, "unavailable", "the registry is unavailable").Retry(2).Because(err)
}

func (s *Server) serve(h handlerFunc) http.HandlerFunc { return handle(s.Log, h) }

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) { fail(w, r, s.Log, err) }
