package provision

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/subnet"
)

// EnsureNetwork returns the sandbox's internal network, creating it with subnet
// if it does not exist. Old engines create duplicates for a repeated name,
// so the network is always looked up first.
func (d *Docker) EnsureNetwork(ctx context.Context, n lifecycle.Names, subnet netip.Prefix) (string, error) {
	if id, err := d.findNetwork(ctx, n); err == nil {
		return id, nil
	} else if !errors.Is(err, lifecycle.ErrNotFound) {
		return "", err
	}
	res, err := d.cli.NetworkCreate(ctx, NetworkName(n), client.NetworkCreateOptions{
		Driver:   "bridge",
		Internal: true,
		Labels:   n.Labels(),
		IPAM: &network.IPAM{Config: []network.IPAMConfig{{
			Subnet:  subnet.Masked(),
			Gateway: subnet.Masked().Addr().Next(),
		}}},
	})
	if err != nil {
		return "", fmt.Errorf("create network %s (%s): %w", NetworkName(n), subnet, err)
	}
	return res.ID, nil
}

func (d *Docker) findNetwork(ctx context.Context, n lifecycle.Names) (string, error) {
	labels := []string{lifecycle.LabelSandbox}
	if !n.Pool() {
		labels = append(labels, lifecycle.LabelUser) // made before sandboxes had names of their own
	}
	for _, l := range labels {
		res, err := d.cli.NetworkList(ctx, client.NetworkListOptions{
			Filters: make(client.Filters).Add("label", lifecycle.LabelStack+"="+n.Stack).Add("label", l+"="+n.Sandbox),
		})
		if err != nil {
			return "", fmt.Errorf("list networks of %s: %w", n.Sandbox, err)
		}
		for _, nw := range res.Items {
			if nw.Name == NetworkName(n) { // the name filter matches substrings, so compare exactly
				return nw.ID, nil
			}
		}
	}
	return "", lifecycle.ErrNotFound
}

// ConnectGateway joins Caddy's container to the user network with the alias
// "gateway" at GatewayIP. Joining twice is not an error.
func (d *Docker) ConnectGateway(ctx context.Context, n lifecycle.Names, networkID string, sn netip.Prefix) error {
	if d.cfg.GatewayContainer == "" {
		return nil
	}
	_, err := d.cli.NetworkConnect(ctx, networkID, client.NetworkConnectOptions{
		Container: d.cfg.GatewayContainer,
		EndpointConfig: &network.EndpointSettings{
			Aliases:    []string{sandboxapi.GatewayAlias},
			IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: subnet.GatewayIP(sn)},
		},
	})
	if err == nil {
		return nil
	}
	// Already connected shows up as a 403/409 with varying text across versions.
	ins, ierr := d.cli.NetworkInspect(ctx, networkID, client.NetworkInspectOptions{})
	if ierr == nil {
		for _, ep := range ins.Network.Containers {
			if ep.Name == d.cfg.GatewayContainer {
				return nil
			}
		}
	}
	return fmt.Errorf("connect %s to network %s: %w", d.cfg.GatewayContainer, NetworkName(n), err)
}

// GatewaySandboxes names the sandboxes whose network Caddy's container is on.
func (d *Docker) GatewaySandboxes(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	if d.cfg.GatewayContainer == "" {
		return out, nil
	}
	res, err := d.cli.ContainerInspect(ctx, d.cfg.GatewayContainer, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", d.cfg.GatewayContainer, err)
	}
	if res.Container.NetworkSettings != nil {
		for name := range res.Container.NetworkSettings.Networks {
			rest, ok := strings.CutPrefix(name, d.cfg.Stack+"-")
			if sandbox, ok2 := strings.CutSuffix(rest, "-net"); ok && ok2 {
				out[sandbox] = true
			}
		}
	}
	return out, nil
}
