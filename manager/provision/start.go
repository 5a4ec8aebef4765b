package provision

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"
)

// Start starts a created or exited container.
func (d *Docker) Start(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start container %s: %w", short(id), err)
	}
	return nil
}
