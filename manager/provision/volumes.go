package provision

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"

	"github.com/affido/affido/manager/lifecycle"
)

// EnsureVolumes creates the session and workspace volumes; creating an
// existing volume is a no-op in Docker.
func (d *Docker) EnsureVolumes(ctx context.Context, n lifecycle.Names) error {
	for _, name := range []string{SessionVolumeName(n), WorkspaceVolumeName(n)} {
		if _, err := d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: n.Labels()}); err != nil {
			return fmt.Errorf("create volume %s: %w", name, err)
		}
	}
	return nil
}
