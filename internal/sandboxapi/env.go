package sandboxapi

import "fmt"

// GatewayAlias is the host name a sandbox reaches the gateway (Caddy's
// gateway listener) by, on every engine.
const GatewayAlias = "gateway"

// Caller is who an agent's API answers: Caddy's address (Docker, where
// Caddy has a fixed one on each user network) or the hash of the key Caddy
// sends (Kubernetes, where its Pods come and go); either or both.
type Caller struct {
	IP      string
	KeyHash string // hex sha256 of the key (EnvCallerKeyHash)
}

// AgentEnv is the environment of an agent container on any engine: where
// its volumes are mounted, where it listens, the gateway's URL, who its API
// answers, then extra.
func AgentEnv(port uint16, gatewayURL string, caller Caller, extra []string) []string {
	env := []string{
		EnvSessionDB + "=/data/session.db",
		EnvWorkspace + "=/workspace",
		fmt.Sprintf("%s=:%d", EnvListen, port),
		EnvGatewayURL + "=" + gatewayURL,
	}
	if caller.IP != "" {
		env = append(env, EnvCallerIP+"="+caller.IP)
	}
	if caller.KeyHash != "" {
		env = append(env, EnvCallerKeyHash+"="+caller.KeyHash)
	}
	return append(env, extra...)
}
