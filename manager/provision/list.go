package provision

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"

	"github.com/affido/affido/manager/lifecycle"
)

// List returns the stack's labelled containers, networks and volumes.
func (d *Docker) List(ctx context.Context) (lifecycle.Inventory, error) {
	inv := lifecycle.NewInventory()
	f := make(client.Filters).Add("label", lifecycle.LabelStack+"="+d.cfg.Stack).Add("label", lifecycle.LabelManaged+"=true")
	cs, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return inv, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs.Items {
		u := sandboxOf(c.Labels)
		inv.Containers[u] = append(inv.Containers[u], lifecycle.Container{ID: c.ID, Sandbox: u, Status: statusOf(string(c.State))})
	}
	ns, err := d.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return inv, fmt.Errorf("list networks: %w", err)
	}
	for _, nw := range ns.Items {
		u := sandboxOf(nw.Labels)
		inv.Networks[u] = append(inv.Networks[u], nw.Name)
	}
	vs, err := d.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return inv, fmt.Errorf("list volumes: %w", err)
	}
	for _, v := range vs.Items {
		u := sandboxOf(v.Labels)
		inv.Volumes[u] = append(inv.Volumes[u], v.Name)
	}
	return inv, nil
}
