package browser

import (
	"context"
	"errors"
	"io"

	"github.com/affido/affido/internal/gatewayapi"
)

type countingEngine struct{ ups int }

func (e *countingEngine) Up(context.Context, string) error {
	e.ups++
	return errors.New("no engine here")
}
func (e *countingEngine) Bridge(context.Context, string) (io.ReadWriteCloser, error) {
	return nil, errors.New("no engine here")
}
func (e *countingEngine) Pause(context.Context, string) error             { return nil }
func (e *countingEngine) Stop(context.Context, string) error              { return nil }
func (e *countingEngine) Remove(context.Context, string) error            { return nil }
func (e *countingEngine) Purge(context.Context, string) error             { return nil }
func (e *countingEngine) List(context.Context) (map[string]string, error) { return nil, nil }

func browserReq(action, url, sel string) gatewayapi.BrowserRequest {
	return gatewayapi.BrowserRequest{Action: action, Agent: "main", URL: url, Selector: sel}
}
