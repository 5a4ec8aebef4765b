// Package kube runs sandboxes on Kubernetes: per sandbox one Pod with the
// hardened securityContext, two PersistentVolumeClaims (/data and
// /workspace) and a NetworkPolicy that lets only Caddy in and the agent out
// only to Caddy's gateway. All of a stack's sandboxes live in one
// namespace of their own, apart from the control plane's (the manager,
// Caddy, the Secrets), and are told apart by labels (see names.go for why
// not a namespace per user).
//
// Kubernetes has no pause: Engine implements lifecycle.Engine but neither
// lifecycle.Pauser nor lifecycle.Networks, so the lifecycle stops a
// sandbox (deletes its Pod, keeps its claims) at the first idle tier. A
// sandbox's "container" is its NetworkPolicy (made by Create) and its Pod
// (made by Start): with the policy and no Pod it is stopped; with neither
// it is removed.
//
// Every decision is taken on the API server's answer, never on a cached
// view: the informer (events.go) only says that something changed, and
// updates retry on a resourceVersion conflict instead of overwriting.
package kube

import (
	"errors"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"

	"github.com/affido/affido/manager/lifecycle"
)

// ErrNotRunning is returned when a Pod ended, or vanished, while the engine
// waited for it to run.
var ErrNotRunning = errors.New("pod is not running")

// Config describes the sandboxes an Engine creates.
type Config struct {
	Namespace string // where the sandboxes' objects live: the sandbox namespace
	Stack     string // name prefix and affido.stack label
	Image     string // agent image
	// ControlNamespace is where Caddy runs: the only Pods a sandbox's
	// NetworkPolicy lets in and out. Empty: Namespace (one namespace for all,
	// as in the contract tests).
	ControlNamespace string
	// PullPolicy of the agent image: IfNotPresent by default.
	PullPolicy string
	AgentPort  uint16 // the agent's port in its Pod (8080)
	GatewayURL string // base URL the agent uses for the gateway (http://gateway:8088)
	// GatewayIP is the address "gateway" resolves to in the Pod (the
	// ClusterIP of Caddy's gateway Service): the Pod needs no DNS.
	GatewayIP   netip.Addr
	GatewayPort uint16 // Caddy's gateway port, the only egress (8088)
	// CallerKeyHash is the sha256 (hex) of the key Caddy sends every
	// sandbox (sandboxapi.HeaderCaller): the agent's API answers only
	// requests that carry it, whichever of Caddy's Pods they come from.
	CallerKeyHash string
	// CaddyLabels select Caddy's Pods: the only ones let in, and the only
	// ones the agent may reach.
	CaddyLabels  map[string]string
	MemoryBytes  int64
	MilliCPU     int64
	StorageClass string            // "" for the cluster's default
	VolumeSize   resource.Quantity // of each claim (1Gi)
	Env          []string          // extra environment for the agent
	// GracePeriod is how long a Pod has to stop (5 s, like Docker's stop).
	GracePeriod int64
}

func (c *Config) defaults() {
	if c.ControlNamespace == "" {
		c.ControlNamespace = c.Namespace
	}
	if c.AgentPort == 0 {
		c.AgentPort = 8080
	}
	if c.GatewayPort == 0 {
		c.GatewayPort = 8088
	}
	if c.PullPolicy == "" {
		c.PullPolicy = "IfNotPresent"
	}
	if len(c.CaddyLabels) == 0 {
		c.CaddyLabels = map[string]string{"app.kubernetes.io/name": "affido-caddy"}
	}
	if c.VolumeSize.IsZero() {
		c.VolumeSize = resource.MustParse("1Gi")
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = 5
	}
}

// Engine drives a stack's sandboxes through the Kubernetes API.
type Engine struct {
	cs  kubernetes.Interface
	cfg Config
}

var _ lifecycle.Engine = (*Engine)(nil)

// New returns an Engine on the cluster cs talks to.
func New(cs kubernetes.Interface, cfg Config) (*Engine, error) {
	cfg.defaults()
	if cfg.Namespace == "" || cfg.Stack == "" || cfg.Image == "" {
		return nil, fmt.Errorf("kubernetes engine: namespace, stack and image are required")
	}
	return &Engine{cs: cs, cfg: cfg}, nil
}
