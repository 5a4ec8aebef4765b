package host

import "sync"

// Delta is a piece of a reply as it streams in: shown, never stored, and
// without an event id (a reconnect gets the stored reply instead).
type Delta struct {
	RunID int64  `json:"run_id"`
	Text  string `json:"text"`
}

// deltaHub hands reply deltas to the open streams of a conversation. A
// stream that does not keep up misses deltas, never the stored entries.
type deltaHub struct {
	mu   sync.Mutex
	subs map[streamKey]map[chan Delta]bool
}

// streamKey is one conversation of one agent (by its agent's ID, which a
// rename keeps).
type streamKey struct {
	agent string
	conv  int64
}

func (d *deltaHub) subscribe(agent string, conv int64) (<-chan Delta, func()) {
	c := make(chan Delta, 256)
	k := streamKey{agent, conv}
	d.mu.Lock()
	if d.subs == nil {
		d.subs = map[streamKey]map[chan Delta]bool{}
	}
	if d.subs[k] == nil {
		d.subs[k] = map[chan Delta]bool{}
	}
	d.subs[k][c] = true
	d.mu.Unlock()
	return c, func() {
		d.mu.Lock()
		delete(d.subs[k], c)
		d.mu.Unlock()
	}
}

func (d *deltaHub) publish(agent string, conv, run int64, text string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.subs[streamKey{agent, conv}] {
		select {
		case c <- Delta{RunID: run, Text: text}:
		default:
		}
	}
}

// Subscribe returns the deltas of the replies in conversation conv of the
// agent with ID agentID, as they stream, and the call that ends them.
func (s *Host) Subscribe(agentID string, conv int64) (<-chan Delta, func()) {
	return s.deltas.subscribe(agentID, conv)
}
