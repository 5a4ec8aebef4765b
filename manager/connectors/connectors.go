// Package connectors holds the owner's connectors: remote MCP servers an
// owner adds to one of their agents. The manager keeps everything about a
// connector (its URL, its header secret, each tool's mode and pin); a
// sandbox learns only the tools it may call, and calls them through the
// gateway, never the server itself. Every connection goes through the
// guarded outbound client (manager/outbound).
//
// Each tool starts off. The owner sets it to allow, ask or off; setting it
// pins the SHA-256 of the tool's definition (Pin). A definition the server
// changes later turns the tool off until the owner sets it again, with a
// notice. The manager re-checks the mode and the pin on every call: the
// sandbox asking is no proof that it may.
package connectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
)

// Mode is what the owner lets an agent do with one tool.
type Mode string

// The modes of a tool. Off is every tool's first mode.
const (
	Off   Mode = "off"   // not offered; a call is refused
	Ask   Mode = "ask"   // every call waits for the owner (the agent's approval flow)
	Allow Mode = "allow" // runs; outside text in the context still makes it ask
)

// Valid reports whether m is one of the modes.
func (m Mode) Valid() bool { return m == Off || m == Ask || m == Allow }

// Connector is one remote MCP server of one agent of one user.
type Connector struct {
	ID    int64  `json:"id"`
	User  string `json:"-"`
	Agent string `json:"agent"`
	Name  string `json:"name"`
	URL   string `json:"url"`
	// HeaderName and Secret are sent with every request to the server's
	// own origin (never after a redirect to another). Secret never leaves
	// the manager: it is not in this type's JSON, which says only
	// HasSecret.
	HeaderName string    `json:"header_name,omitempty"`
	Secret     string    `json:"-"`
	HasSecret  bool      `json:"has_secret"`
	Tools      []Tool    `json:"tools"`
	CreatedAt  time.Time `json:"created_at"`
	// ListedAt is when the server's tools were last listed.
	ListedAt time.Time `json:"listed_at"`
}

// Tool is one of a connector's tools as last listed, with the owner's
// mode and pin.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	// Hash is the SHA-256 of the definition as last listed (Pin), Pinned
	// the one the owner set the mode on ("" before).
	Hash   string `json:"sha256"`
	Pinned string `json:"pinned_sha256,omitempty"`
	Mode   Mode   `json:"mode"`
	// Changed says the server changed the definition after the owner set
	// the mode, which turned the tool off until the owner sets it again.
	Changed bool `json:"changed,omitempty"`
	// Gone says the server no longer lists the tool.
	Gone bool `json:"gone,omitempty"`
	// Usable is false for a tool whose name cannot be offered to a model
	// (ToolName): it stays off.
	Usable bool `json:"usable"`
}

// Store keeps connectors (the registry, on Postgres). Every method is
// scoped to one user: another user's connector is ErrNotFound.
type Store interface {
	// AddConnector stores c (its Tools as given) and returns it with its
	// ID and times; ErrExists when user already has one of that agent
	// and name.
	AddConnector(ctx context.Context, c Connector) (Connector, error)
	// Connectors lists user's connectors, of agent only unless agent is "",
	// by agent and name.
	Connectors(ctx context.Context, user, agent string) ([]Connector, error)
	// Connector returns one of user's connectors, or ErrNotFound.
	Connector(ctx context.Context, user string, id int64) (Connector, error)
	// RemoveConnector deletes one, or answers ErrNotFound.
	RemoveConnector(ctx context.Context, user string, id int64) error
	// UpdateTools replaces the connector's tools with what change returns
	// from the stored ones, atomically (no other update in between), and
	// sets ListedAt when listed is not zero. An error from change writes
	// nothing and is returned.
	UpdateTools(ctx context.Context, user string, id int64, listed time.Time, change func([]Tool) ([]Tool, error)) (Connector, error)
}

// Errors callers branch on.
var (
	ErrNotFound = errors.New("no such connector")
	ErrExists   = errors.New("a connector of that name exists for that agent")
	ErrNoTool   = errors.New("no such tool")
	// ErrInvalid wraps what is wrong with the owner's input.
	ErrInvalid = errors.New("invalid connector")
	// ErrOff is a call of a tool that is off.
	ErrOff = errors.New("the tool is off")
	// ErrChanged is a call of a tool whose definition the server changed
	// since the owner set it: it is now off.
	ErrChanged = errors.New("the tool's definition changed on the server")
	// ErrStricter is a call of a tool that asks now, which the agent
	// thought allowed: it must ask the owner first.
	ErrStricter = errors.New("the tool now asks the owner")
	// ErrServer wraps a failure of the server: unreachable, refused by the
	// outbound guard, an error, an answer that is not MCP.
	ErrServer = errors.New("the MCP server failed")
	// ErrTimeout is a server that did not answer within the timeout.
	ErrTimeout = errors.New("the MCP server did not answer in time")
	// ErrTooLarge is an answer larger than the cap on the wire.
	ErrTooLarge = errors.New("the MCP server's answer is too large")
)

var (
	// nameRule is a connector's name (the rule of an agent's name, too).
	nameRule = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	// toolRule is a tool name a model can be offered inside ToolName.
	toolRule = regexp.MustCompile(`^[A-Za-z0-9_-]{1,48}$`)
	// headerRule is an HTTP header field name (a token), minus those the
	// transport owns.
	headerRule = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_` + "`" + `|~-]{1,64}$`)
)

// ToolPrefix begins every connector tool's name as the model sees it:
// mcp__<connector>__<tool>.
const ToolPrefix = "mcp__"

// ToolName is the name a model calls connector's tool by.
func ToolName(connector, tool string) string { return ToolPrefix + connector + "__" + tool }

// SplitToolName reverses ToolName.
func SplitToolName(name string) (connector, tool string, ok bool) {
	if len(name) <= len(ToolPrefix) || name[:len(ToolPrefix)] != ToolPrefix {
		return "", "", false
	}
	rest := name[len(ToolPrefix):]
	for i := 0; i+1 < len(rest); i++ {
		if rest[i] == '_' && rest[i+1] == '_' {
			connector, tool = rest[:i], rest[i+2:]
			return connector, tool, nameRule.MatchString(connector) && toolRule.MatchString(tool)
		}
	}
	return "", "", false
}

// ValidAgent reports whether agent is an agent's name.
func ValidAgent(agent string) bool { return gatewayapi.ValidAgentName(agent) }

// Limits of what an owner sends.
const (
	MaxURL    = 2048
	MaxSecret = 4096
	// MaxConnectors is how many connectors one user may have.
	MaxConnectors = 50
)

// reservedHeaders are set by the transport or the protocol; a secret in
// one of them would be overwritten or would break the connection.
var reservedHeaders = map[string]bool{"host": true, "content-type": true, "content-length": true, "accept": true,
	"connection": true, "transfer-encoding": true, "mcp-session-id": true, "mcp-protocol-version": true,
	"last-event-id": true, "cookie": true, "user-agent": true}

// NewConnector is what the owner sends to add one.
type NewConnector struct {
	Agent      string `json:"agent"`
	Name       string `json:"name"`
	URL        string `json:"url"`
	HeaderName string `json:"header_name"`
	Secret     string `json:"secret"`
}

// Check says what is wrong with n (an error wrapping ErrInvalid), before
// anything is sent or stored. The URL's address is the outbound guard's
// to judge, when it is dialled.
func (n NewConnector) Check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	switch {
	case !ValidAgent(n.Agent):
		return bad("agent must be an agent's name (a-z, 0-9, -; 1 to 32, starting with a letter)")
	case !nameRule.MatchString(n.Name):
		return bad("name is a-z, 0-9 and -, 1 to 32, starting with a letter")
	case n.URL == "" || len(n.URL) > MaxURL:
		return bad("url is 1 to %d bytes", MaxURL)
	case (n.HeaderName == "") != (n.Secret == ""):
		return bad("header_name and secret go together: both or neither")
	case n.HeaderName != "" && (!headerRule.MatchString(n.HeaderName) || reservedHeaders[strings.ToLower(n.HeaderName)]):
		return bad("header_name must be an HTTP header name the protocol does not use (Authorization, X-Api-Key, …)")
	case len(n.Secret) > MaxSecret:
		return bad("secret is at most %d bytes", MaxSecret)
	}
	for _, c := range n.Secret {
		if c < 0x20 || c == 0x7f {
			return bad("secret cannot hold control characters")
		}
	}
	if _, err := checkURL(n.URL); err != nil {
		return bad("%v", err)
	}
	return nil
}
