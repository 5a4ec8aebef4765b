// Package config reads the manager's configuration from the environment.
// Every variable, with its default, is listed in docs/operations.md.
package config

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/spend"
)

// Config is the manager's configuration.
type Config struct {
	PostgresDSN      string                 // AFFIDO_POSTGRES_DSN
	Listen           string                 // AFFIDO_LISTEN: forward_auth, gateway, metrics (control network)
	AdminSocket      string                 // AFFIDO_ADMIN_SOCKET: admin API (a unix socket, mode 0600; never TCP)
	Stack            string                 // AFFIDO_STACK: name prefix and label of Docker objects
	AgentImage       string                 // AFFIDO_AGENT_IMAGE
	BrowserImage     string                 // AFFIDO_BROWSER_IMAGE: the users' browser sandboxes (Docker runtime)
	BrowserMemory    int64                  // AFFIDO_BROWSER_MEMORY_MB (MiB): one browser sandbox's memory
	SandboxPool      netip.Prefix           // AFFIDO_SANDBOX_POOL
	SubnetBits       int                    // AFFIDO_SANDBOX_SUBNET_BITS
	SandboxProxy     string                 // AFFIDO_SANDBOX_PROXY: Caddy's sandbox-control listener
	ControlKey       string                 // AFFIDO_CONTROL_KEY: the key that listener answers only with
	GatewayContainer string                 // AFFIDO_GATEWAY_CONTAINER: Caddy's container name
	GatewayURL       string                 // AFFIDO_GATEWAY_URL: the gateway as sandboxes see it
	IdlePause        time.Duration          // AFFIDO_IDLE_PAUSE
	IdleStop         time.Duration          // AFFIDO_IDLE_STOP
	IdleRemove       time.Duration          // AFFIDO_IDLE_REMOVE
	MaxRunning       int                    // AFFIDO_MAX_RUNNING
	ProvisionTimeout time.Duration          // AFFIDO_PROVISION_TIMEOUT: a request's wait for its sandbox
	WarmPool         int                    // AFFIDO_WARM_POOL: unclaimed sandboxes kept ready
	Admission        int                    // AFFIDO_ADMISSION: engine-heavy bring-ups at once
	Tick             time.Duration          // AFFIDO_TICK: idle and wake scan interval
	SandboxMemory    int64                  // AFFIDO_SANDBOX_MEMORY_MB (MiB)
	SandboxCPUs      float64                // AFFIDO_SANDBOX_CPUS
	SandboxPids      int64                  // AFFIDO_SANDBOX_PIDS
	Provider         string                 // AFFIDO_PROVIDER: fake or openrouter
	DefaultModel     string                 // AFFIDO_DEFAULT_MODEL: the agents' model unless a prompt names one
	FakeModels       []string               // AFFIDO_FAKE_MODELS
	OpenRouterURL    string                 // AFFIDO_OPENROUTER_URL
	OpenRouterKey    string                 // AFFIDO_OPENROUTER_KEY, or the file AFFIDO_OPENROUTER_KEY_FILE
	OpenRouterModels []string               // AFFIDO_OPENROUTER_MODELS (empty: any vendor/model)
	MarketplaceDir   string                 // AFFIDO_MARKETPLACE_DIR: the built marketplace
	ControlSubnet    netip.Prefix           // AFFIDO_CONTROL_SUBNET: refused to outbound calls
	NotifyQueueMax   int                    // AFFIDO_NOTIFY_QUEUE_MAX: pending notifications per user
	WorkspaceQuotaMB int64                  // AFFIDO_WORKSPACE_QUOTA_MB: a sandbox's workspace and corpus
	BodyTimeout      time.Duration          // AFFIDO_BODY_TIMEOUT: to send a request body, manager and agents
	DrainTimeout     time.Duration          // AFFIDO_DRAIN_TIMEOUT: on SIGTERM, for the requests in flight to finish
	Prices           map[string]spend.Price // AFFIDO_MODEL_PRICES: model=input:output USD per million tokens
	FreeModels       map[string]bool        // AFFIDO_FREE_MODELS: models used without a price
	SpendLimits      spend.Limits           // AFFIDO_SPEND_DAILY_USD, AFFIDO_SPEND_MONTHLY_USD: default limits
	OutboundAllow    []netip.Prefix         // AFFIDO_OUTBOUND_ALLOW: ranges outbound calls may reach despite the guard
	SearchProvider   string                 // AFFIDO_SEARCH_PROVIDER: scripted or brave
	SearchURL        string                 // AFFIDO_SEARCH_URL: the provider's endpoint
	SearchKey        string                 // AFFIDO_SEARCH_KEY, or the file AFFIDO_SEARCH_KEY_FILE
	WebPrices        spend.WebPrices        // AFFIDO_PRICE_WEB_SEARCH, AFFIDO_PRICE_FETCH: USD per call
	WebPerMinute     int                    // AFFIDO_WEB_PER_MINUTE: web_search and fetch_url calls per user per minute (0: no limit)
	BrowserPrice     int64                  // AFFIDO_PRICE_BROWSER_MINUTE: USD per minute of the agents' browser actions
	OpenSignUp       bool                   // AFFIDO_OPEN_SIGNUP: anyone may sign up in the web client (default: invites only)
	SecureCookies    bool                   // AFFIDO_SECURE_COOKIES: the site is served over https (behind a TLS proxy)
	AuthCacheTTL     time.Duration          // AFFIDO_AUTH_CACHE_TTL: how long a credential lookup is kept (0: off)
	EdgeTTL          time.Duration          // AFFIDO_EDGE_TTL: how long Caddy may keep a resolve's 200 (0: off; one manager only)
	ConnectorTimeout time.Duration          // AFFIDO_CONNECTOR_TIMEOUT: one connector operation (connect, list, call)
	PushSubject      string                 // AFFIDO_PUSH_SUBJECT: the operator's contact in Web Push's VAPID token (mailto: or https:)
	CompactTokens    int64                  // AFFIDO_COMPACT_TOKENS: context size (est. tokens) past which agents summarize (0: never)
	CompactHardCap   int64                  // AFFIDO_COMPACT_HARD_CAP: context size past which no model request is sent (0: no cap)
	ApprovalTTL      time.Duration          // AFFIDO_APPROVAL_TTL: how long an approval waits for the owner before it expires
	AgentStorage     string                 // AFFIDO_AGENT_STORAGE: sqlite (files on each user's volume) or postgres (a database per user)
	Runtime          string                 // AFFIDO_RUNTIME: docker (one host) or kubernetes
	Kube             Kube                   // the kubernetes runtime's settings
}

// Kube is what the kubernetes runtime needs besides the common settings.
type Kube struct {
	Namespace        string       // AFFIDO_KUBE_NAMESPACE: the control plane's (the manager's, Caddy's, the Secrets')
	SandboxNamespace string       // AFFIDO_KUBE_SANDBOX_NAMESPACE: the sandboxes' Pods, claims and NetworkPolicies, apart (default "<Namespace>-sandboxes")
	Kubeconfig       string       // AFFIDO_KUBECONFIG: a kubeconfig file; empty: in-cluster
	PodCIDR          netip.Prefix // AFFIDO_KUBE_POD_CIDR: the cluster's pod range (Caddy dials only into it)
	StorageClass     string       // AFFIDO_KUBE_STORAGE_CLASS: of the sandboxes' claims; empty: the default class
	VolumeSize       string       // AFFIDO_KUBE_VOLUME_SIZE: of each claim
	GatewayService   string       // AFFIDO_KUBE_GATEWAY_SERVICE: Caddy's gateway Service, "gateway" in the Pods
	CallerKeyHash    string       // AFFIDO_KUBE_CALLER_KEY_SHA256: hex sha256 of the key Caddy sends sandboxes; the agents answer nothing else
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Load reads the configuration from the environment.
func Load() (Config, error) {
	var errs []error
	str := func(key, def string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return def
	}
	dur := func(key, def string) time.Duration {
		d, err := time.ParseDuration(str(key, def))
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("%s: want a duration such as 5m, got %q", key, os.Getenv(key)))
		}
		return d
	}
	num := func(key string, def int64) int64 {
		n, err := strconv.ParseInt(str(key, strconv.FormatInt(def, 10)), 10, 64)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("%s: want a non-negative integer, got %q", key, os.Getenv(key)))
		}
		return n
	}
	c := Config{
		PostgresDSN:      str("AFFIDO_POSTGRES_DSN", "postgres://affido:affido@/affido?host=/var/run/postgresql&sslmode=disable"),
		Listen:           str("AFFIDO_LISTEN", ":9090"),
		AdminSocket:      str("AFFIDO_ADMIN_SOCKET", "/run/affido/admin.sock"),
		Stack:            str("AFFIDO_STACK", "affido"),
		AgentImage:       str("AFFIDO_AGENT_IMAGE", "affido/agent:dev"),
		BrowserImage:     str("AFFIDO_BROWSER_IMAGE", "affido/browser:dev"),
		BrowserMemory:    num("AFFIDO_BROWSER_MEMORY_MB", 1024) << 20,
		SubnetBits:       int(num("AFFIDO_SANDBOX_SUBNET_BITS", 28)),
		SandboxProxy:     str("AFFIDO_SANDBOX_PROXY", "http://caddy:8081"),
		ControlKey:       os.Getenv(sandboxapi.EnvControlKey),
		GatewayContainer: str("AFFIDO_GATEWAY_CONTAINER", "affido-caddy"),
		GatewayURL:       str("AFFIDO_GATEWAY_URL", "http://gateway:8088"),
		IdlePause:        dur("AFFIDO_IDLE_PAUSE", "5m"),
		IdleStop:         dur("AFFIDO_IDLE_STOP", "1h"),
		IdleRemove:       dur("AFFIDO_IDLE_REMOVE", "24h"),
		MaxRunning:       int(num("AFFIDO_MAX_RUNNING", 50)),
		ProvisionTimeout: dur("AFFIDO_PROVISION_TIMEOUT", "30s"),
		WarmPool:         int(num("AFFIDO_WARM_POOL", 0)),
		Admission:        int(num("AFFIDO_ADMISSION", 4)),
		Tick:             dur("AFFIDO_TICK", "1s"),
		SandboxMemory:    num("AFFIDO_SANDBOX_MEMORY_MB", 512) << 20,
		SandboxPids:      num("AFFIDO_SANDBOX_PIDS", 256),
		NotifyQueueMax:   int(num("AFFIDO_NOTIFY_QUEUE_MAX", 100)),
		WorkspaceQuotaMB: num("AFFIDO_WORKSPACE_QUOTA_MB", 1024),
		BodyTimeout:      dur("AFFIDO_BODY_TIMEOUT", "60s"),
		DrainTimeout:     dur("AFFIDO_DRAIN_TIMEOUT", "10s"),
		AuthCacheTTL:     dur("AFFIDO_AUTH_CACHE_TTL", "1s"),
		EdgeTTL:          dur("AFFIDO_EDGE_TTL", "0s"),
		ConnectorTimeout: dur("AFFIDO_CONNECTOR_TIMEOUT", "30s"),
		CompactTokens:    num("AFFIDO_COMPACT_TOKENS", 60000),
		CompactHardCap:   num("AFFIDO_COMPACT_HARD_CAP", 85000),
		ApprovalTTL:      dur(sandboxapi.EnvApprovalTTL, "168h"),
	}
	if c.ApprovalTTL == 0 {
		errs = append(errs, fmt.Errorf("%s: want a positive duration such as 168h, got %q", sandboxapi.EnvApprovalTTL, os.Getenv(sandboxapi.EnvApprovalTTL)))
	}
	c.Provider = str("AFFIDO_PROVIDER", "fake")
	c.MarketplaceDir = str("AFFIDO_MARKETPLACE_DIR", "/marketplace")
	c.FakeModels = list(str("AFFIDO_FAKE_MODELS", "fake/echo,fake/alt"))
	c.OpenRouterURL = str("AFFIDO_OPENROUTER_URL", "https://openrouter.ai/api/v1")
	c.OpenRouterModels = list(os.Getenv("AFFIDO_OPENROUTER_MODELS"))
	c.OpenRouterKey = os.Getenv("AFFIDO_OPENROUTER_KEY")
	if f := os.Getenv("AFFIDO_OPENROUTER_KEY_FILE"); f != "" && c.OpenRouterKey == "" {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("AFFIDO_OPENROUTER_KEY_FILE: %w", err))
		}
		c.OpenRouterKey = strings.TrimSpace(string(b))
	}
	boolean := func(key string, dst *bool) {
		switch v := str(key, "false"); v {
		case "true", "1":
			*dst = true
		case "false", "0":
		default:
			errs = append(errs, fmt.Errorf("%s: want true or false, got %q", key, v))
		}
	}
	boolean("AFFIDO_OPEN_SIGNUP", &c.OpenSignUp)
	boolean("AFFIDO_SECURE_COOKIES", &c.SecureCookies)
	c.PushSubject = str("AFFIDO_PUSH_SUBJECT", "mailto:affido@localhost")
	if !strings.HasPrefix(c.PushSubject, "mailto:") && !strings.HasPrefix(c.PushSubject, "https://") {
		errs = append(errs, fmt.Errorf("AFFIDO_PUSH_SUBJECT: want mailto:you@example.org or an https:// URL, got %q", c.PushSubject))
	}
	c.SearchProvider = str("AFFIDO_SEARCH_PROVIDER", "scripted")
	c.SearchURL = os.Getenv("AFFIDO_SEARCH_URL")
	c.SearchKey = os.Getenv("AFFIDO_SEARCH_KEY")
	if f := os.Getenv("AFFIDO_SEARCH_KEY_FILE"); f != "" && c.SearchKey == "" {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("AFFIDO_SEARCH_KEY_FILE: %w", err))
		}
		c.SearchKey = strings.TrimSpace(string(b))
	}
	switch c.SearchProvider {
	case "scripted":
	case "brave":
		if c.SearchKey == "" {
			errs = append(errs, fmt.Errorf("AFFIDO_SEARCH_PROVIDER=brave needs AFFIDO_SEARCH_KEY or AFFIDO_SEARCH_KEY_FILE"))
		}
	default:
		errs = append(errs, fmt.Errorf("AFFIDO_SEARCH_PROVIDER: want scripted or brave, got %q", c.SearchProvider))
	}
	if len(c.FakeModels) == 0 {
		c.FakeModels = []string{"fake/echo"}
	}
	switch c.Provider {
	case "fake":
		c.DefaultModel = str("AFFIDO_DEFAULT_MODEL", c.FakeModels[0])
	case "openrouter":
		c.DefaultModel = os.Getenv("AFFIDO_DEFAULT_MODEL")
		if c.OpenRouterKey == "" {
			errs = append(errs, fmt.Errorf("AFFIDO_PROVIDER=openrouter needs AFFIDO_OPENROUTER_KEY or AFFIDO_OPENROUTER_KEY_FILE"))
		}
		if c.DefaultModel == "" {
			errs = append(errs, fmt.Errorf("AFFIDO_PROVIDER=openrouter needs AFFIDO_DEFAULT_MODEL (for example openai/gpt-4o-mini)"))
		}
	default:
		errs = append(errs, fmt.Errorf("AFFIDO_PROVIDER: want fake or openrouter, got %q", c.Provider))
	}
	pool, err := netip.ParsePrefix(str("AFFIDO_SANDBOX_POOL", "10.213.0.0/16"))
	if err != nil {
		errs = append(errs, fmt.Errorf("AFFIDO_SANDBOX_POOL: %w", err))
	}
	c.SandboxPool = pool.Masked()
	control, err := netip.ParsePrefix(str("AFFIDO_CONTROL_SUBNET", "10.212.0.0/24"))
	if err != nil {
		errs = append(errs, fmt.Errorf("AFFIDO_CONTROL_SUBNET: %w", err))
	}
	c.ControlSubnet = control.Masked()
	for _, s := range list(os.Getenv("AFFIDO_OUTBOUND_ALLOW")) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("AFFIDO_OUTBOUND_ALLOW: want CIDR ranges such as 192.0.2.7/32, got %q", s))
			continue
		}
		c.OutboundAllow = append(c.OutboundAllow, p.Masked())
	}
	c.SandboxCPUs, err = strconv.ParseFloat(str("AFFIDO_SANDBOX_CPUS", "1"), 64)
	if err != nil || c.SandboxCPUs <= 0 {
		errs = append(errs, fmt.Errorf("AFFIDO_SANDBOX_CPUS: want a positive number, got %q", os.Getenv("AFFIDO_SANDBOX_CPUS")))
	}
	defPrices := ""
	if c.Provider == "fake" {
		defPrices = "fake/echo=1:2,fake/alt=1:2" // so the tests exercise spend
	}
	if c.Prices, err = spend.ParsePrices(str("AFFIDO_MODEL_PRICES", defPrices)); err != nil {
		errs = append(errs, fmt.Errorf("AFFIDO_MODEL_PRICES: %w", err))
	}
	c.FreeModels = map[string]bool{}
	for _, m := range list(os.Getenv("AFFIDO_FREE_MODELS")) {
		c.FreeModels[m] = true
	}
	usd := func(key, def string) int64 {
		f, err := strconv.ParseFloat(str(key, def), 64)
		if err != nil || f < 0 {
			errs = append(errs, fmt.Errorf("%s: want a non-negative amount of USD, got %q", key, os.Getenv(key)))
		}
		return spend.USD(f)
	}
	// A search costs what the provider bills per request: Brave's Search
	// plan is $5 per 1000. The scripted provider is priced alike, so the
	// tests exercise spend.
	c.WebPrices = spend.WebPrices{Search: usd("AFFIDO_PRICE_WEB_SEARCH", "0.005"), Fetch: usd("AFFIDO_PRICE_FETCH", "0.001")}
	c.WebPerMinute = int(num("AFFIDO_WEB_PER_MINUTE", 30))
	// The browser's time: a small share of a core and 150 MiB or more
	// while it acts.
	c.BrowserPrice = usd("AFFIDO_PRICE_BROWSER_MINUTE", "0.002")
	c.SpendLimits = spend.Limits{Daily: usd("AFFIDO_SPEND_DAILY_USD", "5"), Monthly: usd("AFFIDO_SPEND_MONTHLY_USD", "50")}
	if c.SandboxProxy != "" && len(c.ControlKey) < sandboxapi.MinControlKeyLen {
		errs = append(errs, fmt.Errorf("%s: the key of Caddy's control listener, at least %d characters (./dev.sh up makes one), got %d", sandboxapi.EnvControlKey, sandboxapi.MinControlKeyLen, len(c.ControlKey)))
	}
	c.AgentStorage = str(sandboxapi.EnvAgentStorage, "sqlite")
	if c.AgentStorage != "sqlite" && c.AgentStorage != "postgres" {
		errs = append(errs, fmt.Errorf("%s: want sqlite or postgres, got %q", sandboxapi.EnvAgentStorage, c.AgentStorage))
	}
	c.Runtime = str("AFFIDO_RUNTIME", "docker")
	switch c.Runtime {
	case "docker":
	case "kubernetes":
		c.Kube = Kube{
			Namespace:      str("AFFIDO_KUBE_NAMESPACE", "affido"),
			Kubeconfig:     os.Getenv("AFFIDO_KUBECONFIG"),
			StorageClass:   os.Getenv("AFFIDO_KUBE_STORAGE_CLASS"),
			VolumeSize:     str("AFFIDO_KUBE_VOLUME_SIZE", "1Gi"),
			GatewayService: str("AFFIDO_KUBE_GATEWAY_SERVICE", "affido-gateway"),
			CallerKeyHash:  os.Getenv("AFFIDO_KUBE_CALLER_KEY_SHA256"),
		}
		c.Kube.SandboxNamespace = str("AFFIDO_KUBE_SANDBOX_NAMESPACE", c.Kube.Namespace+"-sandboxes")
		if c.Kube.SandboxNamespace == c.Kube.Namespace {
			errs = append(errs, fmt.Errorf("AFFIDO_KUBE_SANDBOX_NAMESPACE: the sandboxes need a namespace apart from the control plane's (%q)", c.Kube.Namespace))
		}
		cidr, err := netip.ParsePrefix(os.Getenv("AFFIDO_KUBE_POD_CIDR"))
		if err != nil {
			errs = append(errs, fmt.Errorf("AFFIDO_RUNTIME=kubernetes needs AFFIDO_KUBE_POD_CIDR, the cluster's pod range (such as 10.244.0.0/16): %w", err))
		}
		c.Kube.PodCIDR = cidr.Masked()
		if _, err := sandboxapi.ParseCallerKeyHash(c.Kube.CallerKeyHash); err != nil {
			errs = append(errs, fmt.Errorf("AFFIDO_RUNTIME=kubernetes needs AFFIDO_KUBE_CALLER_KEY_SHA256, the hash of Caddy's AFFIDO_CALLER_KEY: %w (got %d characters)", err, len(c.Kube.CallerKeyHash)))
		}
	default:
		errs = append(errs, fmt.Errorf("AFFIDO_RUNTIME: want docker or kubernetes, got %q", c.Runtime))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("configuration: %v", errs)
	}
	return c, nil
}
