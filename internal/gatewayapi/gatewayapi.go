// Package gatewayapi is the contract of the gateway, written once for the
// agent that calls it and the manager that serves it: the model, the
// notifications and wake reports a sandbox hands the manager, the
// marketplace, and fetch_url and web_search, which run in the manager (the
// sandbox has no egress). The agent calls every route with its sandbox
// token as a bearer token.
package gatewayapi

import (
	"encoding/json"
	"regexp"
	"time"
)

// Prefix is where the gateway's routes sit on the manager: the agent's
// base URL is its gateway address followed by Prefix.
const Prefix = "/v1/gateway"

// Paths under the gateway's base URL (…/v1/gateway).
const (
	ChatPath        = "/chat/completions" // POST: OpenAI-compatible chat completions (internal/openai)
	ModelsPath      = "/models"           // GET: the models served, OpenAI's list
	WhoamiPath      = "/whoami"           // GET: Whoami
	NotifyPath      = "/notify"           // POST Notification: 202 Queued
	WakeAtPath      = "/wake-at"          // POST WakeAt: 204
	MarketplacePath = "/marketplace"      // GET …/index.json and the files below it (package marketplace)
	FetchPath       = "/fetch"            // POST FetchRequest: Page
	SearchPath      = "/search"           // POST SearchRequest: SearchResults
	ConnectorsPath  = "/connectors"       // GET ?agent=NAME: ConnectorTools
	ConnectorCall   = "/connectors/call"  // POST ConnectorCallRequest: ConnectorResult
	BrowserPath     = "/browser"          // POST BrowserRequest: BrowserPage (the agent's browser, manager/browser)
	// With AFFIDO_AGENT_STORAGE=postgres: the agents' own database.
	StoragePath        = "/storage"         // GET: StorageCredential (made on the first ask)
	StorageConnectPath = "/storage/connect" // GET with Upgrade: StorageUpgrade: 101, then the Postgres protocol
)

// StorageUpgrade is the Upgrade token of StorageConnectPath: after the 101
// the connection carries the Postgres wire protocol to the user's own
// database, and nothing else.
const StorageUpgrade = "affido-postgres"

// StorageCredential is the answer of GET StoragePath: the Postgres role and
// database of the sandbox's user, which only that role can reach, and its
// password. The agent keeps it in memory (never on a volume) and connects
// through StorageConnectPath: the sandbox has no other route to Postgres.
type StorageCredential struct {
	Role     string `json:"role"`
	Database string `json:"database"`
	Password string `json:"password"`
}

// Whoami is the answer of GET WhoamiPath: the user the sandbox's token
// belongs to.
type Whoami struct {
	User string `json:"user"`
}

// Bounds of a Notification.
const (
	MaxNotifyKey  = 200  // bytes
	MaxNotifyText = 4000 // bytes
)

// Notification is the body of POST NotifyPath: a message for the owner,
// delivered by the manager. The same Key twice is one delivery, so the
// agent may hand it off again after a crash. Kind and Agent are optional
// (older agents send neither): they shape the Web Push payload (its title,
// where a tap leads, its urgency), never whether it is delivered.
type Notification struct {
	Key   string     `json:"key"`             // 1 to MaxNotifyKey bytes
	Text  string     `json:"text"`            // 1 to MaxNotifyText bytes
	DueAt *time.Time `json:"due_at"`          // when it was due
	Kind  string     `json:"kind,omitempty"`  // one of the Kind constants, or ""
	Agent string     `json:"agent,omitempty"` // the agent it is from (an agent name), or ""
}

// Kinds of notification.
const (
	KindReminder = "reminder" // a reminder fired
	KindApproval = "approval" // a tool call waits for the owner's decision
	KindJob      = "job"      // a scheduled job ran
	KindSpend    = "spend"    // the spend limit stopped the agent (the manager's own)
	// KindConnector: a connector's tool turned off because its server
	// changed its definition (the manager's own).
	KindConnector = "connector"
)

// agentName is the agent's own rule for names (agent/agents.ValidName).
var agentName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// ValidAgentName reports whether name is an agent's name by the agent's
// rule, for the manager, which cannot import the agent's packages.
func ValidAgentName(name string) bool { return agentName.MatchString(name) }

// Valid reports whether n is within its bounds.
func (n Notification) Valid() bool {
	switch n.Kind {
	case "", KindReminder, KindApproval, KindJob, KindSpend:
	default:
		return false
	}
	return n.Key != "" && len(n.Key) <= MaxNotifyKey && n.Text != "" && len(n.Text) <= MaxNotifyText &&
		(n.Agent == "" || agentName.MatchString(n.Agent))
}

// Queued is the answer of POST NotifyPath. Queued is false when the key
// was already queued.
type Queued struct {
	Key    string `json:"key"`
	Queued bool   `json:"queued"`
}

// WakeAt is the body of POST WakeAtPath: the agent's next due time, nil
// when nothing waits on time, so the manager can wake a paused sandbox.
type WakeAt struct {
	At *time.Time `json:"at"`
}

// Problem types of the notify route (RFC 7807 "type" suffixes).
const (
	ProblemBadNotification = "bad-notification"        // 400: key, text, kind or agent out of bounds
	ProblemQueueFull       = "notification-queue-full" // 429 with Retry-After
)

// Limits of one fetch.
const (
	FetchTimeout  = 15 * time.Second
	FetchMaxBytes = 2 << 20
	MaxSearchHits = 10
)

// FetchRequest asks the gateway to GET one http or https URL.
type FetchRequest struct {
	URL string `json:"url"`
}

// Page is a fetched page: its provenance and its text (HTML reduced to
// text). SHA256 is of the body bytes as received (up to FetchMaxBytes).
type Page struct {
	URL         string    `json:"url"`
	FinalURL    string    `json:"final_url"` // after redirects
	Status      int       `json:"status"`
	ContentType string    `json:"content_type"`
	FetchedAt   time.Time `json:"fetched_at"`
	SHA256      string    `json:"sha256"`
	Bytes       int       `json:"bytes"`
	Truncated   bool      `json:"truncated,omitempty"` // the body was longer than FetchMaxBytes
	Title       string    `json:"title,omitempty"`
	Text        string    `json:"text"`
}

// SearchRequest asks the gateway's search provider.
type SearchRequest struct {
	Query string `json:"query"`
	Count int    `json:"count,omitempty"` // at most MaxSearchHits (default 5)
}

// SearchResults are one search's hits.
type SearchResults struct {
	Provider   string      `json:"provider"`
	Query      string      `json:"query"`
	SearchedAt time.Time   `json:"searched_at"`
	Hits       []SearchHit `json:"hits"`
}

// SearchHit is one result.
type SearchHit struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
}

// Problem types the fetch route answers with (RFC 7807 "type" suffixes),
// so the agent can tell the model what happened without reading prose.
const (
	ProblemRefused   = "fetch-refused"  // the guard refused an address, a scheme or a redirect
	ProblemFailed    = "fetch-failed"   // the site could not be reached or timed out
	ProblemNotText   = "fetch-not-text" // the body is not text
	ProblemBadURL    = "bad-url"        // not an absolute http or https URL
	ProblemBadSearch = "bad-search"     // an empty or over-long query
	ProblemNoSearch  = "search-failed"  // the provider failed
	// Both web routes are charged to the user's spend and rate limited.
	ProblemSpendLimit = "spend-limit"    // 402: the call's price would pass the daily or monthly spend limit (the detail says which)
	ProblemWebRate    = "web-rate-limit" // 429 with Retry-After: the user's web calls per minute are used up
)

// ConnectorTool is a tool of one of the owner's connectors (remote MCP
// servers, held by the manager) that an agent may call: Name is what the
// model calls it (mcp__<connector>__<tool>); Mode is "allow" (runs, unless
// outside text makes it ask) or "ask" (always asks the owner). Tools that
// are off are not listed.
type ConnectorTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Mode        string          `json:"mode"`
	Connector   string          `json:"connector"`
}

// ConnectorTools is the answer of GET ConnectorsPath?agent=NAME.
type ConnectorTools struct {
	Tools []ConnectorTool `json:"tools"`
}

// ConnectorCallRequest asks the manager to call a connector's tool for
// Agent, with the Mode the agent was offered it in; the manager checks
// the mode and the tool's pinned definition again.
type ConnectorCallRequest struct {
	Agent     string          `json:"agent"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Mode      string          `json:"mode"`
}

// ConnectorResult is a tool call's answer. Text is the server's, outside
// text, at most the manager's cap (Truncated when cut); SHA256 is of Text.
type ConnectorResult struct {
	Tool      string    `json:"tool"`
	Connector string    `json:"connector"`
	Text      string    `json:"text"`
	IsError   bool      `json:"is_error,omitempty"`
	Truncated bool      `json:"truncated,omitempty"`
	SHA256    string    `json:"sha256"`
	CalledAt  time.Time `json:"called_at"`
}

// Problem types of the connector routes. Each is a tool error for the
// model: its detail is the manager's own words, never the server's.
const (
	ProblemConnectorNoTool   = "connector-no-tool"      // 404: no such connector tool for this agent
	ProblemConnectorOff      = "connector-tool-off"     // 403: the owner set it off
	ProblemConnectorChanged  = "connector-tool-changed" // 409: its definition changed; off until the owner sets it again
	ProblemConnectorAsks     = "connector-tool-asks"    // 409: it asks the owner now
	ProblemConnectorFailed   = "connector-failed"       // 502: unreachable, refused, an error, not MCP
	ProblemConnectorTimeout  = "connector-timeout"      // 504: no answer within the manager's timeout
	ProblemConnectorTooLarge = "connector-too-large"    // 502: an answer past the manager's cap
)

// Browser actions (BrowserRequest.Action).
const (
	BrowserOpen       = "open"       // URL: load it in the agent's tab
	BrowserRead       = "read"       // the tab's page as text
	BrowserScreenshot = "screenshot" // the tab's page as a PNG
	BrowserClick      = "click"      // URL (the page's site), Selector or Text
	BrowserType       = "type"       // URL, Selector, Text; Submit presses Enter after
	BrowserUpload     = "upload"     // URL, Selector, FileName, File: give a page's file input a file
	BrowserClose      = "close"      // close the tab
	// BrowserSaveDownload: Download, a finished download of the user's
	// browser; the page carries it (File, FileName).
	BrowserSaveDownload = "save_download"
)

// Bounds of the browser.
const (
	BrowserTextMax   = 64 << 10 // bytes of page text one read returns
	BrowserUploadMax = 16 << 20 // bytes of one uploaded file
)

// BrowserRequest is the body of POST BrowserPath. Agent names the tab (one
// per agent). URL, for the actions that act on a page, is the page the
// agent means: the manager refuses the action when the tab's page is on
// another host, so a rule for a site allows acting on that site only.
type BrowserRequest struct {
	Action   string `json:"action"`
	Agent    string `json:"agent"`
	URL      string `json:"url,omitempty"`
	Selector string `json:"selector,omitempty"`
	Text     string `json:"text,omitempty"`
	Submit   bool   `json:"submit,omitempty"`
	FileName string `json:"file_name,omitempty"`
	File     []byte `json:"file,omitempty"`
	Download string `json:"download,omitempty"`
}

// BrowserPage is what a browser action leaves: the tab's page, and what
// the proxy refused while the action ran.
type BrowserPage struct {
	URL       string `json:"url"`
	Title     string `json:"title,omitempty"`
	Status    int    `json:"status,omitempty"` // of the main document, for open
	Text      string `json:"text,omitempty"`   // read
	Truncated bool   `json:"truncated,omitempty"`
	// Fields are the page's form fields and buttons (read), so the model
	// can name one by selector.
	Fields []BrowserField `json:"fields,omitempty"`
	PNG    []byte         `json:"png,omitempty"` // screenshot
	// Refused counts the connections the proxy refused during the action
	// (private addresses, the control network, a sandbox...); RefusedTo
	// names the last of them.
	Refused   int      `json:"refused,omitempty"`
	RefusedTo []string `json:"refused_to,omitempty"`
	// Downloads are the files pages downloaded in the user's browser, the
	// newest last (they stay in the browser sandbox until one is saved).
	Downloads []BrowserDownload `json:"downloads,omitempty"`
	// File and FileName are a saved download's bytes and the name the
	// page suggested for it (save_download).
	File     []byte `json:"file,omitempty"`
	FileName string `json:"file_name,omitempty"`
}

// BrowserDownload is one file a page downloaded. ID is the browser's
// (a GUID); Name and URL are the page's.
type BrowserDownload struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	URL   string `json:"url"`
	Size  int64  `json:"size"`
	State string `json:"state"` // inProgress, completed, canceled, too_large (past 4 MiB: never saved)
}

// BrowserField is one form field or button of a page.
type BrowserField struct {
	Selector string `json:"selector"`
	Kind     string `json:"kind"` // input type, "button", "textarea", "select", "a"
	Label    string `json:"label,omitempty"`
}
