package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/affido/affido/internal/browserapi"
	"github.com/affido/affido/manager/lifecycle"
)

// LabelBrowser marks a user's browser sandbox and its profile volume (with
// the stack's label, and not lifecycle.LabelManaged: the agent sandboxes'
// reconcile does not count them as its own).
const LabelBrowser = "affido.browser"

// BrowserConfig describes the browser sandboxes.
type BrowserConfig struct {
	Image       string // AFFIDO_BROWSER_IMAGE, built locally
	MemoryBytes int64
	NanoCPUs    int64
	PidsLimit   int64
}

// Browsers is the Docker engine of the users' browser sandboxes
// (manager/browser's Engine): a container on no network at all, its
// profile on a volume of its own.
type Browsers struct {
	d   *Docker
	cfg BrowserConfig
}

// Browsers returns the browser sandboxes' engine on d's connection.
func (d *Docker) Browsers(cfg BrowserConfig) *Browsers { return &Browsers{d: d, cfg: cfg} }

func (b *Browsers) container(user string) string { return b.d.cfg.Stack + "-" + user + "-browser" }

// ProfileVolume is the name of a user's browser profile volume.
func (b *Browsers) ProfileVolume(user string) string { return b.d.cfg.Stack + "-" + user + "-profile" }

func (b *Browsers) labels(user string) map[string]string {
	return map[string]string{lifecycle.LabelStack: b.d.cfg.Stack, LabelBrowser: user}
}

// Up makes sure the user's browser sandbox runs: its volume and container
// made if missing, then started or unpaused.
func (b *Browsers) Up(ctx context.Context, user string) error {
	res, err := b.d.cli.ContainerInspect(ctx, b.container(user), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		if err := b.create(ctx, user); err != nil {
			return err
		}
		res, err = b.d.cli.ContainerInspect(ctx, b.container(user), client.ContainerInspectOptions{})
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", b.container(user), err)
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[LabelBrowser] != user || c.Config.Labels[lifecycle.LabelStack] != b.d.cfg.Stack {
		return fmt.Errorf("%s exists but is not labelled as %s's browser", b.container(user), user)
	}
	switch {
	case c.State != nil && c.State.Paused:
		return b.d.Unpause(ctx, c.ID)
	case c.State != nil && c.State.Running:
		return nil
	default:
		return b.d.Start(ctx, c.ID)
	}
}

func (b *Browsers) create(ctx context.Context, user string) error {
	if _, err := b.d.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: b.ProfileVolume(user), Labels: b.labels(user)}); err != nil {
		return fmt.Errorf("create volume %s: %w", b.ProfileVolume(user), err)
	}
	stop := 10
	pids := b.cfg.PidsLimit
	_, err := b.d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: b.container(user),
		Config: &container.Config{
			Image:       b.cfg.Image,
			Labels:      b.labels(user),
			StopTimeout: &stop,
		},
		HostConfig: &container.HostConfig{
			// No network at all: the one way out is the bridge the
			// manager starts, to its guarded proxy.
			NetworkMode:    "none",
			ReadonlyRootfs: true,
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges:true"},
			Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=256m"},
			ShmSize:        64 << 20,
			Mounts:         []mount.Mount{{Type: mount.TypeVolume, Source: b.ProfileVolume(user), Target: browserapi.ProfileDir}},
			Resources: container.Resources{
				Memory:     b.cfg.MemoryBytes,
				MemorySwap: b.cfg.MemoryBytes,
				NanoCPUs:   b.cfg.NanoCPUs,
				PidsLimit:  &pids,
			},
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		},
	})
	if err != nil && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("create container %s: %w", b.container(user), err)
	}
	return nil
}

// Bridge starts a bridge in the user's running browser sandbox and returns
// its standard input and output: the session's one connection.
func (b *Browsers) Bridge(ctx context.Context, user string) (io.ReadWriteCloser, error) {
	ex, err := b.d.cli.ExecCreate(ctx, b.container(user), client.ExecCreateOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"/usr/local/bin/affido-browser", "bridge"},
	})
	if err != nil {
		return nil, fmt.Errorf("start the bridge in %s: %w", b.container(user), err)
	}
	att, err := b.d.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("attach the bridge in %s: %w", b.container(user), err)
	}
	pr, pw := io.Pipe()
	go func() {
		// Without a TTY the engine frames stdout and stderr; the bridge
		// writes the session to stdout and only errors to stderr.
		_, err := stdcopy.StdCopy(pw, stderrLog{user}, att.Reader)
		pw.CloseWithError(errors.Join(err, io.EOF))
	}()
	return &hijacked{Reader: pr, conn: att.Conn}, nil
}

type stderrLog struct{ user string }

func (l stderrLog) Write(p []byte) (int, error) {
	slog.Warn("browser bridge", "user", l.user, "stderr", string(p))
	return len(p), nil
}

// hijacked is an exec's standard output (demultiplexed) and input.
type hijacked struct {
	io.Reader
	conn net.Conn
}

func (h *hijacked) Write(p []byte) (int, error) { return h.conn.Write(p) }
func (h *hijacked) Close() error                { return h.conn.Close() }

// Pause freezes the user's browser sandbox.
func (b *Browsers) Pause(ctx context.Context, user string) error {
	return ignoreGone(b.d.Pause(ctx, b.container(user)))
}

// Stop stops it (unpausing it first: a paused container gets no signal,
// and Chromium writes its profile when it is asked to stop).
func (b *Browsers) Stop(ctx context.Context, user string) error {
	res, err := b.d.cli.ContainerInspect(ctx, b.container(user), client.ContainerInspectOptions{})
	if err != nil {
		return ignoreGone(err)
	}
	if res.Container.State != nil && res.Container.State.Paused {
		if err := b.d.Unpause(ctx, res.Container.ID); err != nil {
			return err
		}
	}
	return ignoreGone(b.d.Stop(ctx, res.Container.ID))
}

// Remove removes the container; the profile volume stays.
func (b *Browsers) Remove(ctx context.Context, user string) error {
	_, err := b.d.cli.ContainerRemove(ctx, b.container(user), client.ContainerRemoveOptions{Force: true})
	return ignoreGone(err)
}

// Purge removes the container and the profile volume (a user's reset: the
// sign-ins go too).
func (b *Browsers) Purge(ctx context.Context, user string) error {
	if err := b.Remove(ctx, user); err != nil {
		return err
	}
	_, err := b.d.cli.VolumeRemove(ctx, b.ProfileVolume(user), client.VolumeRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove volume %s: %w", b.ProfileVolume(user), err)
	}
	return nil
}

// Kill kills the user's browser sandbox at once (tests: a crash mid-task).
func (b *Browsers) Kill(ctx context.Context, user string) error {
	_, err := b.d.cli.ContainerKill(ctx, b.container(user), client.ContainerKillOptions{Signal: "KILL"})
	return ignoreGone(err)
}

// List returns the stack's browser sandboxes: user -> Docker state.
func (b *Browsers) List(ctx context.Context) (map[string]string, error) {
	f := make(client.Filters).Add("label", lifecycle.LabelStack+"="+b.d.cfg.Stack).Add("label", LabelBrowser)
	cs, err := b.d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list browser containers: %w", err)
	}
	out := map[string]string{}
	for _, c := range cs.Items {
		out[c.Labels[LabelBrowser]] = string(c.State)
	}
	return out, nil
}

func ignoreGone(err error) error {
	if err == nil || cerrdefs.IsNotFound(err) || cerrdefs.IsNotModified(err) {
		return nil
	}
	var nf interface{ NotFound() }
	if errors.As(err, &nf) {
		return nil
	}
	return err
}
