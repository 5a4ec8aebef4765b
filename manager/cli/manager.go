package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/affido/affido/internal/edgeapi"
	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/httpserve"
	"github.com/affido/affido/internal/scripted"
	"github.com/affido/affido/manager/agentclient"
	"github.com/affido/affido/manager/agentdb"
	"github.com/affido/affido/manager/browser"
	"github.com/affido/affido/manager/config"
	"github.com/affido/affido/manager/connectors"
	"github.com/affido/affido/manager/edge"
	"github.com/affido/affido/manager/gateway"
	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/notify"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/provision"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/server"
	"github.com/affido/affido/migrations"
)

func managerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "manager", Short: "Run the sandbox manager"}
	cmd.AddCommand(&cobra.Command{
		Use:   "serve",
		Short: "Serve forward_auth, the gateway and the admin API; drive the sandboxes",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context()) },
	}, &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the local manager's /healthz answers 200",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			addr := cfg.Listen
			if strings.HasPrefix(addr, ":") {
				addr = "127.0.0.1" + addr
			}
			resp, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://" + addr + "/healthz")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				return fmt.Errorf("healthz: %s: %s", resp.Status, b)
			}
			return nil
		},
	}, &cobra.Command{
		Use:   "migrate",
		Short: "Apply the registry migrations and exit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			store, err := registry.Open(cmd.Context(), cfg.PostgresDSN)
			if err != nil {
				return err
			}
			defer store.Close()
			n, err := migrate(cmd.Context(), store)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied %d migration(s)\n", n)
			return nil
		},
	})
	return cmd
}

func migrate(ctx context.Context, store *registry.Store) (int, error) {
	ms, err := registry.LoadMigrations(migrations.FS)
	if err != nil {
		return 0, err
	}
	return store.Migrate(ctx, ms)
}

// waitFor retries fn until it succeeds or ctx ends; the manager may start
// before Postgres does.
func waitFor(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) error {
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		log.Info("waiting for "+what, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func serve(ctx context.Context) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	store, err := registry.Open(ctx, cfg.PostgresDSN)
	if err != nil {
		return err
	}
	defer store.Close()
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitFor(startCtx, log, "postgres", store.Ping); err != nil {
		return err
	}
	if n, err := migrate(startCtx, store); err != nil {
		return err
	} else if n > 0 {
		log.Info("applied migrations", "count", n)
	}

	// Served whatever the default (AFFIDO_AGENT_STORAGE): a user moved to
	// Postgres (admin migrate-storage) keeps it.
	agentStorage, err := agentdb.Open(ctx, cfg.PostgresDSN)
	if err != nil {
		return err
	}
	defer agentStorage.Close()
	agentStorage.MakeOnAsk = cfg.AgentStorage == "postgres"

	eng, imageID, closeEngine, err := engine(startCtx, log, cfg)
	if err != nil {
		return err
	}
	defer closeEngine()

	// The lifecycle and the background writers outlive the signal: they
	// serve the requests the drain lets finish, and stop after it.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	handoff, handOff := context.WithCancel(context.Background())
	defer handOff()

	var mgr *lifecycle.Manager
	metrics := lifecycle.NewMetrics(func() map[string]int { return mgr.StateCounts() })
	agentClient := agentclient.New(cfg.SandboxProxy, cfg.ControlKey)
	mgr = lifecycle.New(eng, store, agentClient, lifecycle.Config{
		Stack:            cfg.Stack,
		Subnets:          cfg.SandboxPool,
		SubnetBits:       cfg.SubnetBits,
		Tiers:            lifecycle.Tiers{Pause: cfg.IdlePause, Stop: cfg.IdleStop, Remove: cfg.IdleRemove},
		MaxRunning:       cfg.MaxRunning,
		ImageID:          imageID,
		WarmPool:         cfg.WarmPool,
		Admission:        cfg.Admission,
		ProvisionTimeout: cfg.ProvisionTimeout,
		Tick:             cfg.Tick,
	}, log, metrics)
	// The edge's decision cache (issue 30): Caddy keeps a resolve's 200
	// for up to AFFIDO_EDGE_TTL while it holds this manager's lease; every
	// revoke and every step that stops serving a sandbox makes it forget
	// first. It needs the credential cache (the session's expiry), the
	// control key (Caddy's polls) and an engine that gives each sandbox an
	// address of its own (Docker's per-user networks): where a Pod's IP
	// can pass to another user's Pod, a kept endpoint could reach it in
	// the moment before an engine event is forgotten.
	var pub *server.Server
	var decisions *edge.Decisions
	_, ownAddresses := eng.(*provision.Docker)
	switch {
	case cfg.EdgeTTL <= 0:
	case cfg.AuthCacheTTL <= 0 || cfg.ControlKey == "" || !ownAddresses:
		log.Warn("AFFIDO_EDGE_TTL is set but Caddy keeps no decisions: it needs AFFIDO_AUTH_CACHE_TTL, AFFIDO_CONTROL_KEY and the Docker engine")
	default:
		decisions = edge.New(func(t edgeapi.Touch) { pub.TouchEdge(t) }) // polls come once pub serves
		mgr.OnUnserve(decisions.Forget)
	}
	go mgr.Run(work)

	var provider gateway.Provider = scripted.NewModel(cfg.FakeModels)
	if cfg.Provider == "openrouter" {
		provider = &gateway.OpenRouter{URL: cfg.OpenRouterURL, Key: cfg.OpenRouterKey, Allow: cfg.OpenRouterModels}
	}
	// Outbound calls never reach the control network or a sandbox.
	deny := []netip.Prefix{cfg.ControlSubnet, cfg.SandboxPool}
	if cfg.Kube.PodCIDR.IsValid() {
		deny = append(deny, cfg.Kube.PodCIDR)
	}
	notifyClient := outbound.NewClient(outbound.Config{
		Allow: cfg.OutboundAllow,
		Deny:  deny,
	})
	deliverer := notify.New(store, log, notifyClient)
	vapid, err := notify.LoadVAPID(startCtx, store)
	if err != nil {
		return err
	}
	// Push endpoints are the browsers' choice: the same guarded client.
	deliverer.Push = &notify.Pusher{Store: store, Client: notifyClient, Keys: vapid, Subject: cfg.PushSubject, Log: log}
	go deliverer.Run(work)
	guard := outbound.NewGuard(outbound.Config{Allow: cfg.OutboundAllow, Deny: deny})
	fetchClient := outbound.NewClient(outbound.Config{
		Allow:   cfg.OutboundAllow,
		Deny:    deny,
		Timeout: gatewayapi.FetchTimeout,
	})
	// Connectors (remote MCP servers) go through the same guard, with
	// their own time bound.
	conns := &connectors.Service{Store: store, Timeout: cfg.ConnectorTimeout, Log: log,
		Client: outbound.NewClient(outbound.Config{Allow: cfg.OutboundAllow, Deny: deny, Timeout: cfg.ConnectorTimeout})}
	var search gateway.Searcher = gateway.ScriptedSearch{}
	if cfg.SearchProvider == "brave" {
		search = &gateway.BraveSearch{URL: cfg.SearchURL, Key: cfg.SearchKey}
	}
	creds := server.NewCredentialCache(cfg.AuthCacheTTL)
	if decisions != nil {
		creds.Edge = decisions
	}
	tokenUse := server.NewTokenUse(store, log)
	go tokenUse.Run(work)
	pub = &server.Server{
		EdgeDeps: server.EdgeDeps{Auth: store, Credentials: creds, TokenUse: tokenUse, Resolver: mgr,
			Health: healthOf{store, mgr}, Metrics: metrics, Handoff: handoff,
			Decisions: decisions, EdgeTTL: cfg.EdgeTTL, ControlKey: cfg.ControlKey},
		GatewayDeps: server.GatewayDeps{Gateway: store, Provider: provider, Usage: store,
			Prices: cfg.Prices, FreeModels: cfg.FreeModels, Ledger: store, SpendLimits: cfg.SpendLimits,
			WebPrices: cfg.WebPrices, WebPerMinute: cfg.WebPerMinute, BrowserPrice: cfg.BrowserPrice,
			Notifications: store, Kick: deliverer.Kick, NotifyQueueMax: cfg.NotifyQueueMax, Wakes: mgr,
			FetchClient: fetchClient, Search: search, MarketplaceDir: cfg.MarketplaceDir, Connectors: conns},
		OwnerDeps: server.OwnerDeps{Accounts: store, Owners: store, URLCheck: guard, OpenSignUp: cfg.OpenSignUp,
			Push: store, PushKey: vapid.PublicKey(), PushPlainHTTP: cfg.OutboundAllow,
			SecureCookies: cfg.SecureCookies, SpendOwner: store},
		Log: log,
	}
	conns.Notify = pub.ConnectorNotice
	// The agents' browser: a sandbox per user, on Docker only (on
	// Kubernetes the browser tools answer that there is none).
	if docker, ok := eng.(*provision.Docker); ok {
		browsers := browser.New(browser.Config{
			Engine: docker.Browsers(provision.BrowserConfig{Image: cfg.BrowserImage, MemoryBytes: cfg.BrowserMemory,
				NanoCPUs: int64(cfg.SandboxCPUs * 1e9), PidsLimit: 512}),
			Dial: guard.DialContext, Transport: guard.Transport(gatewayapi.FetchTimeout),
			IdlePause: cfg.IdlePause, IdleStop: cfg.IdleStop, IdleRemove: cfg.IdleRemove, Log: log,
			Audit: func(user, kind string, detail map[string]any) {
				ctx, cancel := context.WithTimeout(work, 2*time.Second)
				defer cancel()
				if err := store.Audit(ctx, user, kind, detail); err != nil {
					log.Warn("browser: not recorded in the activity", "user", user, "kind", kind, "err", err)
				}
			},
		})
		defer browsers.Close()
		go browsers.Run(work, cfg.Tick)
		pub.Browser = browsers
		mgr.OnReset(browsers.Reset)
	}
	pub.AgentStorage = agentStorage
	admin := &server.Admin{Manager: mgr, Store: store, SpendLimits: cfg.SpendLimits, Credentials: creds, Metrics: metrics, Archiver: agentClient, Mover: agentClient, Maker: agentStorage, Log: log}
	errc := make(chan error, 2)
	pubLn, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	adminLn, err := listenAdmin(cfg.AdminSocket)
	if err != nil {
		return err
	}
	servers := []*http.Server{httpserve.New(pub.Handler(), cfg.BodyTimeout), httpserve.New(admin.Handler(), cfg.BodyTimeout)}
	servers[0].RegisterOnShutdown(pub.EndStreams) // the owners' live streams never end by themselves
	for i, ln := range []net.Listener{pubLn, adminLn} {
		log.Info("listening", "addr", ln.Addr().String())
		go func() { errc <- servers[i].Serve(ln) }()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	// Drain: refuse new connections (Caddy retries them until the next
	// manager listens), let the requests in flight finish, hand the
	// resolves still waiting to the next manager, then stop the lifecycle.
	log.Info("draining", "bound", cfg.DrainTimeout.String())
	if err := httpserve.Drain(cfg.DrainTimeout, handOff, servers...); err != nil {
		log.Warn("drain", "err", err)
	}
	stopWork()
	log.Info("drained")
	// The API token uses since the last write, now that no request runs.
	flush, cancel3 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel3()
	return tokenUse.Flush(flush)
}

type healthOf struct {
	*registry.Store
	*lifecycle.Manager
}

// listenAdmin listens on the admin API's unix socket, readable and writable
// by the manager's user alone; a stale socket from an earlier run is removed.
func listenAdmin(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("admin socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale admin socket: %w", err)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket mode: %w", err)
	}
	return ln, nil
}
