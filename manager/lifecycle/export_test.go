package lifecycle

import "net/netip"

// NewFakeEngine gives the contract suite (contract_test.go) the in-memory
// engine, shaped like Docker (pause and networks) or, bare, like an engine
// with neither; with where its agents are and whether its volumes exist.
func NewFakeEngine(bare bool) (Engine, func(netip.AddrPort) (string, bool), func(string) bool) {
	eng := newFakeEngine()
	locate := newFakeAgents(eng).Locate
	if !bare {
		return eng, locate, eng.hasVolumes
	}
	eng.bare = true
	return struct {
		Containers
		Volumes
		Watcher
	}{eng, eng, eng}, locate, eng.hasVolumes
}
