package connectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"
)

// Default limits of a Service.
const (
	DefaultTimeout = 30 * time.Second
	DefaultMaxText = 64 << 10 // bytes of a result's text the model gets
	DefaultMaxWire = 1 << 20  // bytes of one answer on the wire
)

// Notice is what the owner is told when a tool turned off by itself.
type Notice struct {
	User, Agent string
	Connector   Connector
	Tool        string
	Text        string
	// Key is the same for the same change, so a repeated notice is one
	// (connector id, tool, the new definition's hash).
	Key string
}

// Service runs the owner's and the agents' connector operations.
type Service struct {
	Store Store
	// Client is the guarded outbound client (manager/outbound): every
	// address checked at dial time and after every redirect.
	Client *http.Client
	// Timeout bounds one whole operation: connect, list, call
	// (DefaultTimeout). MaxText bounds a result's text for the model
	// (DefaultMaxText); MaxWire one answer's bytes (DefaultMaxWire).
	Timeout time.Duration
	MaxText int
	MaxWire int64
	// Notify tells the owner a tool turned off (nil: nobody is told).
	Notify func(ctx context.Context, n Notice)
	Log    *slog.Logger
	Now    func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Service) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}

func (s *Service) maxWire() int64 {
	if s.MaxWire > 0 {
		return s.MaxWire
	}
	return DefaultMaxWire
}

func (s *Service) maxText() int {
	if s.MaxText > 0 {
		return s.MaxText
	}
	return DefaultMaxText
}

// Add connects to the server n names, lists its tools, and stores the
// connector with every tool off. Nothing is stored when n is invalid or
// the server cannot be listed.
func (s *Service) Add(ctx context.Context, user string, n NewConnector) (Connector, error) {
	if err := n.Check(); err != nil {
		return Connector{}, err
	}
	have, err := s.Store.Connectors(ctx, user, "")
	if err != nil {
		return Connector{}, err
	}
	if len(have) >= MaxConnectors {
		return Connector{}, fmt.Errorf("%w: at most %d connectors", ErrInvalid, MaxConnectors)
	}
	c := Connector{User: user, Agent: n.Agent, Name: n.Name, URL: n.URL, HeaderName: n.HeaderName, Secret: n.Secret, HasSecret: n.Secret != ""}
	listed, err := s.listRemote(ctx, c)
	if err != nil {
		return Connector{}, err
	}
	c.Tools, _ = merge(nil, listed)
	c.ListedAt = s.now()
	return s.Store.AddConnector(ctx, c)
}

func (s *Service) listRemote(ctx context.Context, c Connector) ([]listedTool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	sess, err := dial(ctx, s.Client, c, s.maxWire(), cancel)
	if err != nil {
		return nil, err
	}
	defer sess.close()
	return sess.list(ctx)
}

// merge applies what the server lists now to the stored tools: a new tool
// is off; a tool whose definition no longer matches its pin is turned off
// and reported in changed; a tool the server dropped is kept, off and gone.
func merge(stored []Tool, listed []listedTool) (tools []Tool, changed []Tool) {
	old := map[string]Tool{}
	for _, t := range stored {
		old[t.Name] = t
	}
	seen := map[string]bool{}
	for _, l := range listed {
		if seen[l.Name] {
			continue // a server listing a name twice gets its first
		}
		seen[l.Name] = true
		hash, err := Pin(l.Name, l.Description, l.InputSchema)
		if err != nil {
			continue
		}
		t := Tool{Name: l.Name, Description: l.Description, InputSchema: l.InputSchema, Hash: hash, Mode: Off,
			Usable: toolRule.MatchString(l.Name)}
		if o, ok := old[l.Name]; ok {
			t.Mode, t.Pinned, t.Changed = o.Mode, o.Pinned, o.Changed
			if t.Pinned != "" && t.Pinned != hash && !t.Changed {
				t.Mode, t.Changed = Off, true
				changed = append(changed, t)
			}
		}
		if !t.Usable {
			t.Mode = Off
		}
		tools = append(tools, t)
	}
	for _, o := range stored {
		if !seen[o.Name] {
			o.Mode, o.Gone = Off, true
			tools = append(tools, o)
		}
	}
	return tools, changed
}

// Refresh lists the connector's tools on its server again and applies
// them (merge), telling the owner of every tool that turned off.
func (s *Service) Refresh(ctx context.Context, user string, id int64) (Connector, error) {
	c, err := s.Store.Connector(ctx, user, id)
	if err != nil {
		return Connector{}, err
	}
	listed, err := s.listRemote(ctx, c)
	if err != nil {
		return c, err
	}
	return s.apply(ctx, c, listed)
}

func (s *Service) apply(ctx context.Context, c Connector, listed []listedTool) (Connector, error) {
	var changed []Tool
	c, err := s.Store.UpdateTools(ctx, c.User, c.ID, s.now(), func(stored []Tool) ([]Tool, error) {
		var tools []Tool
		tools, changed = merge(stored, listed)
		return tools, nil
	})
	if err != nil {
		return c, err
	}
	for _, t := range changed {
		s.notice(ctx, c, t)
	}
	return c, nil
}

func (s *Service) notice(ctx context.Context, c Connector, t Tool) {
	if s.Log != nil {
		s.Log.Info("connectors: a tool's definition changed; turned off", "user", c.User, "agent", c.Agent, "connector", c.Name, "tool", t.Name,
			"pinned", t.Pinned, "now", t.Hash)
	}
	if s.Notify == nil {
		return
	}
	s.Notify(ctx, Notice{User: c.User, Agent: c.Agent, Connector: c, Tool: t.Name, Key: fmt.Sprintf("%d-%s-%s", c.ID, t.Name, t.Hash[:16]),
		Text: fmt.Sprintf("The tool %s of connector %s (agent %s) changed on its server (its name, description or input schema), so it is off until you set it again.",
			t.Name, c.Name, c.Agent)})
}

// SetMode sets tool's mode and pins the definition stored for it (the one
// the owner was shown). A tool the server dropped, or whose name cannot be
// offered to a model, can only be off.
func (s *Service) SetMode(ctx context.Context, user string, id int64, tool string, mode Mode) (Connector, error) {
	if !mode.Valid() {
		return Connector{}, fmt.Errorf("%w: mode is off, ask or allow", ErrInvalid)
	}
	return s.Store.UpdateTools(ctx, user, id, time.Time{}, func(tools []Tool) ([]Tool, error) {
		i := slices.IndexFunc(tools, func(t Tool) bool { return t.Name == tool })
		if i < 0 {
			return nil, ErrNoTool
		}
		t := &tools[i]
		if mode != Off && (t.Gone || !t.Usable) {
			return nil, fmt.Errorf("%w: %s can only be off (the server no longer lists it, or its name cannot be offered to a model)", ErrInvalid, tool)
		}
		t.Mode, t.Pinned, t.Changed = mode, t.Hash, false
		return tools, nil
	})
}

// Offered is a tool an agent may call, as the model is shown it.
type Offered struct {
	Name        string          `json:"name"` // ToolName
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Mode        Mode            `json:"mode"` // ask or allow
	Connector   string          `json:"connector"`
}

// Offer lists the tools agent of user may call: those set to ask or allow
// whose definition is the pinned one, from what is stored (no server is
// asked: a call checks again).
func (s *Service) Offer(ctx context.Context, user, agent string) ([]Offered, error) {
	cs, err := s.Store.Connectors(ctx, user, agent)
	if err != nil {
		return nil, err
	}
	out := []Offered{}
	for _, c := range cs {
		for _, t := range c.Tools {
			if offered(t) {
				out = append(out, Offered{Name: ToolName(c.Name, t.Name), Description: t.Description, InputSchema: t.InputSchema,
					Mode: t.Mode, Connector: c.Name})
			}
		}
	}
	return out, nil
}

func offered(t Tool) bool {
	return t.Mode != Off && t.Pinned == t.Hash && !t.Changed && !t.Gone && t.Usable
}

// Call runs one call an agent asks for: name as ToolName, seen the mode the
// agent was offered. The manager checks again: the connector and tool
// exist for that agent, the mode is not off (nor stricter than seen), and
// the server's definition, listed afresh, is the pinned one (a changed one
// turns the tool off, with a notice, and refuses the call). Connect, list
// and call share one timeout.
func (s *Service) Call(ctx context.Context, user, agent, name string, args json.RawMessage, seen Mode) (Result, error) {
	cname, tname, ok := SplitToolName(name)
	if !ok || !ValidAgent(agent) {
		return Result{}, ErrNoTool
	}
	cs, err := s.Store.Connectors(ctx, user, agent)
	if err != nil {
		return Result{}, err
	}
	i := slices.IndexFunc(cs, func(c Connector) bool { return c.Name == cname })
	if i < 0 {
		return Result{}, ErrNoTool
	}
	c := cs[i]
	if err := permitted(c, tname, seen); err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	sess, err := dial(ctx, s.Client, c, s.maxWire(), cancel)
	if err != nil {
		return Result{}, err
	}
	defer sess.close()
	listed, err := sess.list(ctx)
	if err != nil {
		return Result{}, err
	}
	if c, err = s.apply(ctx, c, listed); err != nil {
		return Result{}, err
	}
	if err := permitted(c, tname, seen); err != nil {
		return Result{}, err
	}
	return sess.call(ctx, tname, args, s.maxText())
}

// permitted says whether tool of c may be called by an agent that was
// offered it with mode seen.
func permitted(c Connector, tool string, seen Mode) error {
	i := slices.IndexFunc(c.Tools, func(t Tool) bool { return t.Name == tool })
	if i < 0 {
		return ErrNoTool
	}
	t := c.Tools[i]
	switch {
	case t.Changed:
		return ErrChanged
	case !offered(t):
		return ErrOff
	case t.Mode == Ask && seen != Ask:
		return ErrStricter
	}
	return nil
}

// Remove deletes a connector (its secret with it).
func (s *Service) Remove(ctx context.Context, user string, id int64) error {
	return s.Store.RemoveConnector(ctx, user, id)
}

// IsServerFailure reports whether err is the server's doing (unreachable,
// refused, slow, too large), not the caller's or the store's.
func IsServerFailure(err error) bool {
	return errors.Is(err, ErrServer) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrTooLarge)
}
