package connectorstest

import "testing"

func TestMemoryStore(t *testing.T) { Run(t, &Memory{}, "alice", "bob") }
