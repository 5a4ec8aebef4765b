package server

import (
	"fmt"
	"testing"
)

// Filling the tracked accounts with names tried once does not forget a
// locked account.
func TestAccountLocksKeepTheLockedWhenFull(t *testing.T) {
	l := newAccountLocks()
	clock := newTestClock()
	l.now = clock.Now
	fail := func(user string) bool {
		if _, ok := l.begin(user); !ok {
			return false
		}
		l.end(user, wrong)
		return true
	}
	for range lockAfter {
		fail("alice")
	}
	for i := range maxAccounts + 100 {
		fail(fmt.Sprintf("name%d", i))
	}
	if len(l.m) > maxAccounts {
		t.Fatalf("%d accounts tracked, bound %d", len(l.m), maxAccounts)
	}
	if wait, ok := l.begin("alice"); ok || wait != lockFirst {
		t.Fatalf("alice after the flood: ok %v, wait %s", ok, wait)
	}
	clock.Add(lockForget)
	if _, ok := l.begin("alice"); !ok {
		t.Fatal("alice a day later")
	}
	l.end("alice", abandoned)
	if st := l.m["alice"]; st == nil || st.failures != 0 || st.judging != 0 {
		t.Fatalf("a day later the count is forgotten: %+v", st)
	}
}
