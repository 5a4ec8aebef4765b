// Package sandboxapi is the contract between the manager and the agent in a
// sandbox, written once for both: the environment the manager gives the
// agent's container, the control routes the manager calls (through Caddy's
// control listener) and their JSON, and which agent routes count as the
// user's activity.
package sandboxapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"time"
)

// UserPattern is the syntax of a user id. Caddy's /u/<user> route
// (caddy/Caddyfile) spells it out too; a test holds the two together.
// User ids never hold a dot, so no user id equals a warm-pool sandbox name.
const UserPattern = `[A-Za-z0-9_-]{1,64}`

var validUser = regexp.MustCompile(`^` + UserPattern + `$`)

// ValidUser reports whether id is a well-formed user id: the manager
// accepts no other, and a sandbox is claimed by no other.
func ValidUser(id string) bool { return validUser.MatchString(id) }

// Environment the manager sets in the agent's container (the agent image
// sets EnvSessionDB, EnvWorkspace and EnvPrivsep itself as well).
const (
	EnvSessionDB      = "SESSION_DB"                // the session database; its directory also holds identity.json
	EnvWorkspace      = "WORKSPACE"                 // the workspace volume
	EnvListen         = "AFFIDO_LISTEN"             // the agent's API address, e.g. ":8080"
	EnvGatewayURL     = "AFFIDO_GATEWAY_URL"        // the gateway as the sandbox reaches it, e.g. http://gateway:8088
	EnvCallerIP       = "AFFIDO_CALLER_IP"          // the one address the API answers: Caddy's on the user network (Docker)
	EnvCallerKeyHash  = "AFFIDO_CALLER_KEY_SHA256"  // hex sha256 of the key Caddy sends as HeaderCaller: the API answers only requests that carry it (Kubernetes, where Caddy's address is not fixed)
	EnvModel          = "AFFIDO_MODEL"              // the default model
	EnvWorkspaceQuota = "AFFIDO_WORKSPACE_QUOTA_MB" // MiB of workspace and corpus together
	EnvBodyTimeout    = "AFFIDO_BODY_TIMEOUT"       // how long a request body may take (a Go duration)
	EnvPrivsep        = "AFFIDO_PRIVSEP"            // "required" in the image: refuse to run the tools as the agent
	EnvApprovalTTL    = "AFFIDO_APPROVAL_TTL"       // how long an approval waits for the owner before it expires (a Go duration)
	EnvAgentStorage   = "AFFIDO_AGENT_STORAGE"      // "sqlite" (the default: files on the data volume) or "postgres" (the user's database, through the gateway)
	// Compaction: past EnvCompactTokens of estimated context (4 bytes a
	// token) a conversation is summarized in the background; past
	// EnvCompactHardCap no model request is sent until it is. 0 turns either off.
	EnvCompactTokens  = "AFFIDO_COMPACT_TOKENS"
	EnvCompactHardCap = "AFFIDO_COMPACT_HARD_CAP"
)

// Development only: the manager never sets these. A sandbox learns its
// user and gateway token from POST /claim; an agent run by hand outside the
// image claims with these at start if both are set and it is not claimed.
const (
	EnvDevUser         = "AFFIDO_USER"
	EnvDevGatewayToken = "AFFIDO_GATEWAY_TOKEN"
)

// Control routes, as the agent serves them (the manager reaches them as
// /_sandbox/<ip:port><path> on Caddy's control listener).
const (
	HealthPath = "/health" // GET: Health
	PausePath  = "/pause"  // POST, with IfIdle=1 from the manager: PauseAnswer, or 409 while busy
	WakePath   = "/wake"   // POST: WakeAnswer
	ClaimPath  = "/claim"  // POST Claim, with HeaderControl: Health; 409 ProblemClaimedByOther
	IfIdle     = "if_idle" // the query parameter of PausePath
	// BackupPath (GET, with HeaderControl) streams the sandbox's archive
	// (a tar ending with its manifest); RestorePath (POST the archive, with
	// HeaderControl, Force=1 to replace data) answers RestoreAnswer, 409
	// when the sandbox has data, 422 for an archive it refuses.
	BackupPath  = "/backup"
	RestorePath = "/restore"
	Force       = "force"
	// MigrateStoragePath (POST ?to=sqlite|postgres, with HeaderControl)
	// moves every agent's database to that storage: MigrateStorageAnswer.
	MigrateStoragePath = "/storage/migrate"
)

// Storage kinds (EnvAgentStorage, MigrateStoragePath's to).
const (
	StorageSQLite   = "sqlite"
	StoragePostgres = "postgres"
)

// MigrateStorageAnswer is the answer of MigrateStoragePath: where the
// agents' databases were and are now, how many agents and rows were
// copied (0 when they were there already).
type MigrateStorageAnswer struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Agents int    `json:"agents"`
	Rows   int    `json:"rows"`
}

// HeaderControl marks a request that came through Caddy's control listener,
// which sets it to "1"; the user route strips it. The agent accepts
// ClaimPath only with it.
const HeaderControl = "X-Affido-Control"

// HeaderControlKey carries the control key from the manager to Caddy's
// control listener, which answers nothing without it (caddy/controlkey)
// and removes it before it proxies: no agent ever sees it. EnvControlKey
// holds it in the manager's and Caddy's environment, never a sandbox's.
const (
	HeaderControlKey = "X-Affido-Control-Key"
	EnvControlKey    = "AFFIDO_CONTROL_KEY"
	// MinControlKeyLen is the shortest control key either side accepts.
	MinControlKeyLen = 32
)

// HeaderCaller carries the caller key: Caddy sets it on every request it
// sends a sandbox (both listeners; a client's own is dropped), and an
// agent given EnvCallerKeyHash answers nothing else. The agent is given
// only the key's hash, so a tool that reads its environment learns nothing
// that passes; the key itself reaches the agent's process with every
// request, and it is one for the whole stack, so the NetworkPolicy (no
// sandbox reaches another) stays the other half of the wall.
const HeaderCaller = "X-Affido-Caller"

// ErrBadKeyHash is returned by ParseCallerKeyHash.
var ErrBadKeyHash = errors.New("want the 64 hex digits of the sha256 of a caller key that is not empty")

// ParseCallerKeyHash reads a hash as EnvCallerKeyHash holds it. The hash of
// the empty key is refused: an empty Secret must not make agents answer an
// empty header.
func ParseCallerKeyHash(s string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return sum, ErrBadKeyHash
	}
	copy(sum[:], b)
	if sum == sha256.Sum256(nil) {
		return sum, ErrBadKeyHash
	}
	return sum, nil
}

// CallerKeyHash is the hex sha256 of a caller key, as EnvCallerKeyHash
// holds it (`printf %s "$key" | sha256sum`).
func CallerKeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Problem types (RFC 7807 "type" suffixes) of the control routes.
const (
	ProblemUnclaimed      = "unclaimed"        // 503 with Retry-After: the sandbox has no user yet
	ProblemClaimedByOther = "claimed-by-other" // 409: the sandbox already belongs to another user
	ProblemClaimedAlready = "claimed-already"  // 409: IfUnclaimed, and the sandbox belongs to this user under another token
	ProblemBadClaim       = "bad-claim"        // 400: the user id or the token is malformed
	ProblemNotControl     = "not-control"      // 403: a claim without HeaderControl
)

// ErrClaimedByOther is what a manager's client returns when the agent
// answers a claim with ProblemClaimedByOther: the sandbox holds another
// user's data and is never rebound.
var ErrClaimedByOther = errors.New("the sandbox belongs to another user")

// ErrClaimedAlready is what a manager's client returns when the agent
// answers a claim IfUnclaimed with ProblemClaimedAlready: the sandbox is
// the user's already, under a token someone else set.
var ErrClaimedAlready = errors.New("the sandbox belongs to this user already, under another token")

// Health is the answer of GET /health.
type Health struct {
	Status  string `json:"status"` // "ok"
	Claimed bool   `json:"claimed"`
	User    string `json:"user"` // empty while unclaimed
}

// PauseAnswer is the answer of POST /pause: the earliest stored deadline of
// the work the agent leaves behind, nil when nothing sleeps.
type PauseAnswer struct {
	NextWakeAt *time.Time `json:"next_wake_at"`
}

// RestoreAnswer is the agent's answer to RestorePath: the files restored
// and the next due time of the restored work.
type RestoreAnswer struct {
	Files int `json:"files"`
	PauseAnswer
}

// WakeAnswer is the answer of POST /wake.
type WakeAnswer struct {
	Woken bool `json:"woken"`
	PauseAnswer
}

// Claim is the body of POST /claim: the user the sandbox belongs to from
// now on and the gateway token it calls the gateway with. A claim for the
// user it already belongs to replaces the token, unless IfUnclaimed: then
// it is refused with ProblemClaimedAlready (the same token again is
// accepted). The manager's claim from the warm pool sends IfUnclaimed, so
// it never replaces a token another manager's bind has set meanwhile.
type Claim struct {
	User        string `json:"user"`
	Token       string `json:"token"`
	IfUnclaimed bool   `json:"if_unclaimed,omitempty"`
}
