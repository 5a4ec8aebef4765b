package provision

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"
)

// Stop stops a container, unpausing it first (a paused container cannot
// receive the stop signal).
func (d *Docker) Stop(ctx context.Context, id string) error {
	timeout := 5
	if _, err := d.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		return fmt.Errorf("stop container %s: %w", short(id), err)
	}
	return nil
}
