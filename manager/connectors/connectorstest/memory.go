// Package connectorstest has what connector tests share: an in-memory
// Store, the contract every Store passes (Run), and an MCP server made
// with the official SDK's server side whose tools a test can change, slow
// down or inflate (Server; the e2e stack's probe serves it too).
package connectorstest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/affido/affido/manager/connectors"
)

// Memory is a connectors.Store in memory.
type Memory struct {
	mu   sync.Mutex
	next int64
	all  []connectors.Connector
}

var _ connectors.Store = (*Memory)(nil)

func clone(c connectors.Connector) connectors.Connector {
	c.Tools = slices.Clone(c.Tools)
	return c
}

// AddConnector stores c.
func (m *Memory) AddConnector(_ context.Context, c connectors.Connector) (connectors.Connector, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.all {
		if o.User == c.User && o.Agent == c.Agent && o.Name == c.Name {
			return connectors.Connector{}, connectors.ErrExists
		}
	}
	m.next++
	c.ID, c.CreatedAt = m.next, time.Now().UTC()
	if c.Tools == nil {
		c.Tools = []connectors.Tool{}
	}
	m.all = append(m.all, clone(c))
	return clone(c), nil
}

// Connectors lists user's, of agent unless agent is "".
func (m *Memory) Connectors(_ context.Context, user, agent string) ([]connectors.Connector, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []connectors.Connector{}
	for _, c := range m.all {
		if c.User == user && (agent == "" || c.Agent == agent) {
			out = append(out, clone(c))
		}
	}
	slices.SortFunc(out, func(a, b connectors.Connector) int {
		return cmp.Or(cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

func (m *Memory) index(user string, id int64) int {
	return slices.IndexFunc(m.all, func(c connectors.Connector) bool { return c.User == user && c.ID == id })
}

// Connector returns one.
func (m *Memory) Connector(_ context.Context, user string, id int64) (connectors.Connector, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.index(user, id)
	if i < 0 {
		return connectors.Connector{}, connectors.ErrNotFound
	}
	return clone(m.all[i]), nil
}

// RemoveConnector deletes one.
func (m *Memory) RemoveConnector(_ context.Context, user string, id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.index(user, id)
	if i < 0 {
		return connectors.ErrNotFound
	}
	m.all = slices.Delete(m.all, i, i+1)
	return nil
}

// UpdateTools changes one's tools under the lock.
func (m *Memory) UpdateTools(_ context.Context, user string, id int64, listed time.Time, change func([]connectors.Tool) ([]connectors.Tool, error)) (connectors.Connector, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.index(user, id)
	if i < 0 {
		return connectors.Connector{}, connectors.ErrNotFound
	}
	tools, err := change(slices.Clone(m.all[i].Tools))
	if err != nil {
		return connectors.Connector{}, err
	}
	if tools == nil {
		tools = []connectors.Tool{}
	}
	m.all[i].Tools = tools
	if !listed.IsZero() {
		m.all[i].ListedAt = listed
	}
	return clone(m.all[i]), nil
}
