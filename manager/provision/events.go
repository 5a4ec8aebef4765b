package provision

import (
	"context"
	"fmt"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/affido/affido/manager/lifecycle"
)

// Events streams container events of this stack until ctx ends or the
// stream breaks; the error channel then carries the reason.
func (d *Docker) Events(ctx context.Context) (<-chan lifecycle.Event, <-chan error) {
	res := d.cli.Events(ctx, client.EventsListOptions{
		Filters: make(client.Filters).Add("type", string(events.ContainerEventType)).Add("label", lifecycle.LabelStack+"="+d.cfg.Stack),
	})
	out := make(chan lifecycle.Event)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			select {
			case m := <-res.Messages:
				kind, ok := eventKind(string(m.Action))
				if !ok {
					continue
				}
				ev := lifecycle.Event{Sandbox: sandboxOf(m.Actor.Attributes), Kind: kind}
				select {
				case out <- ev:
				case <-ctx.Done():
					errc <- ctx.Err()
					return
				}
			case err := <-res.Err:
				errc <- fmt.Errorf("docker event stream: %w", err)
				return
			}
		}
	}()
	return out, errc
}

// eventKind is the lifecycle's word for a Docker container event; ok is
// false for events that change nothing the lifecycle tracks (create,
// exec_* and health_status from the healthcheck, ...).
func eventKind(action string) (kind lifecycle.EventKind, ok bool) {
	switch action {
	case "start", "restart":
		return lifecycle.EventStarted, true
	case "pause":
		return lifecycle.EventPaused, true
	case "unpause":
		return lifecycle.EventUnpaused, true
	case "die":
		return lifecycle.EventDied, true
	case "destroy":
		return lifecycle.EventRemoved, true
	case "stop", "kill", "oom":
		return lifecycle.EventChanged, true
	}
	return "", false
}
