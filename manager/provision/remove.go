package provision

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/affido/affido/manager/lifecycle"
)

// RemoveContainer removes the sandbox's container; named volumes stay.
func (d *Docker) RemoveContainer(ctx context.Context, n lifecycle.Names) error {
	_, err := d.cli.ContainerRemove(ctx, ContainerName(n), client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", ContainerName(n), err)
	}
	return nil
}

// RemoveAll removes the container, the network and both volumes (a reset).
func (d *Docker) RemoveAll(ctx context.Context, n lifecycle.Names) error {
	if err := d.RemoveContainer(ctx, n); err != nil {
		return err
	}
	for {
		id, err := d.findNetwork(ctx, n)
		if errors.Is(err, lifecycle.ErrNotFound) {
			break
		}
		if err != nil {
			return err
		}
		if d.cfg.GatewayContainer != "" {
			_, _ = d.cli.NetworkDisconnect(ctx, id, client.NetworkDisconnectOptions{Container: d.cfg.GatewayContainer, Force: true})
		}
		if _, err := d.cli.NetworkRemove(ctx, id, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove network %s: %w", NetworkName(n), err)
		}
	}
	for _, v := range []string{SessionVolumeName(n), WorkspaceVolumeName(n)} {
		if _, err := d.cli.VolumeRemove(ctx, v, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove volume %s: %w", v, err)
		}
	}
	return nil
}
