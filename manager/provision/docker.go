package provision

import (
	"context"
	"fmt"
	"strings"

	"github.com/moby/moby/client"

	"github.com/affido/affido/manager/lifecycle"
)

// Config describes the sandboxes a Docker provisioner creates.
type Config struct {
	Stack            string // name prefix and affido.stack label
	Image            string // agent image, built locally
	AgentPort        uint16 // port the agent listens on in its container
	GatewayContainer string // Caddy's container, joined to every user network as "gateway"
	GatewayURL       string // base URL the agent uses for the gateway
	MemoryBytes      int64
	NanoCPUs         int64
	PidsLimit        int64
	Env              []string // extra environment for the agent (AFFIDO_MODEL=...)
}

// Docker provisions sandboxes through the Docker Engine API.
type Docker struct {
	cli *client.Client
	cfg Config
}

// NewDocker connects to the engine named by the environment (DOCKER_HOST),
// negotiating the API version on first use.
func NewDocker(cfg Config) (*Docker, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if cfg.AgentPort == 0 {
		cfg.AgentPort = 8080
	}
	return &Docker{cli: cli, cfg: cfg}, nil
}

// Close releases the client.
func (d *Docker) Close() error { return d.cli.Close() }

// Ping checks that the engine answers.
func (d *Docker) Ping(ctx context.Context) error {
	_, err := d.cli.Ping(ctx, client.PingOptions{})
	return err
}

// CheckImage reports a clear error when the agent image is missing.
func (d *Docker) CheckImage(ctx context.Context) error {
	if _, err := d.cli.ImageInspect(ctx, d.cfg.Image); err != nil {
		return fmt.Errorf("agent image %s: %w (build it with ./dev.sh build)", d.cfg.Image, err)
	}
	return nil
}

// ImageID returns the ID of the agent image, so a pool built from an
// older image can be told apart.
func (d *Docker) ImageID(ctx context.Context) (string, error) {
	res, err := d.cli.ImageInspect(ctx, d.cfg.Image)
	if err != nil {
		return "", fmt.Errorf("inspect agent image %s: %w", d.cfg.Image, err)
	}
	return res.ID, nil
}

// sandboxOf is the sandbox an object belongs to by its labels. Objects
// made before sandboxes had names of their own carry only the user, which
// was their name.
func sandboxOf(labels map[string]string) string {
	if s := labels[lifecycle.LabelSandbox]; s != "" {
		return s
	}
	return labels[lifecycle.LabelUser]
}

func short(id string) string {
	if len(id) > 12 && !strings.Contains(id, "-") {
		return id[:12]
	}
	return id
}

var (
	_ lifecycle.Engine   = (*Docker)(nil)
	_ lifecycle.Pauser   = (*Docker)(nil)
	_ lifecycle.Networks = (*Docker)(nil)
)
