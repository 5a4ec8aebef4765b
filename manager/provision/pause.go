package provision

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"
)

// Pause freezes a running container.
func (d *Docker) Pause(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("pause container %s: %w", short(id), err)
	}
	return nil
}

// Unpause thaws a paused container.
func (d *Docker) Unpause(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("unpause container %s: %w", short(id), err)
	}
	return nil
}
