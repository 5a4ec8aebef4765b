package server

import (
	"sync"
	"time"
)

// Wrong passwords lock the account they were for, from every address: the
// 5th wrong password in a row locks its password sign-in for 10 s, and
// each wrong one after a lock ends locks it twice as long (20 s, 40 s, …),
// at most 15 min; so an account takes about 100 guesses a day at most,
// from however many addresses. The right password during a lock is refused
// too (else the lock would not slow guessing); sessions and API tokens
// already made keep working. A right password forgets the count, and so
// does a day without a wrong one. At most 20 000 accounts are tracked.
const (
	lockAfter   = 5
	lockFirst   = 10 * time.Second
	lockMax     = 15 * time.Minute
	lockForget  = 24 * time.Hour
	maxAccounts = 20000
)

// accountLocks counts wrong passwords per user name (names that do not
// exist count the same, so a lock tells nothing about who exists).
type accountLocks struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]*lockState
}

type lockState struct {
	failures int       // wrong passwords in a row
	last     time.Time // the last of them
	until    time.Time // locked until
	judging  int       // attempts begun and not ended
}

// verdict is how an attempt ended.
type verdict int

const (
	abandoned verdict = iota // not judged (the client left, the registry failed)
	wrong
	right
)

func newAccountLocks() *accountLocks {
	return &accountLocks{now: time.Now, m: map[string]*lockState{}}
}

// lockFor is how long the failures-th wrong password in a row locks.
func lockFor(failures int) time.Duration {
	n := failures - lockAfter
	if n < 0 {
		return 0
	}
	if n >= 7 { // 10 s << 7 is past the cap
		return lockMax
	}
	return min(lockFirst<<n, lockMax)
}

// begin asks to judge one password for user. It refuses, with the wait,
// while the account is locked, or while as many attempts are being judged
// as may still fail before it locks (attempts at once count before they
// are judged). Every begin that succeeds must be ended.
func (l *accountLocks) begin(user string) (wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	st := l.m[user]
	if st != nil && st.judging == 0 && now.Sub(st.last) >= lockForget {
		delete(l.m, user)
		st = nil
	}
	if st == nil {
		if len(l.m) >= maxAccounts {
			l.makeRoom(now)
		}
		st = &lockState{}
		l.m[user] = st
	}
	if now.Before(st.until) {
		return max(st.until.Sub(now), time.Second), false
	}
	if st.judging >= max(lockAfter-st.failures, 1) {
		return time.Second, false
	}
	st.judging++
	return 0, true
}

// end records how an attempt begun for user ended: a wrong password counts
// and, from the lockAfter-th in a row, locks; a right one forgets the count.
func (l *accountLocks) end(user string, v verdict) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.m[user]
	if st == nil { // made room for others meanwhile
		return
	}
	st.judging--
	switch v {
	case right:
		st.failures, st.until = 0, time.Time{}
		if st.judging == 0 {
			delete(l.m, user)
		}
	case wrong:
		now := l.now()
		st.failures++
		st.last = now
		if d := lockFor(st.failures); d > 0 {
			st.until = now.Add(d)
		}
	}
}

// makeRoom forgets, to make room for one more account: accounts idle past
// lockForget; else those never locked; else those not locked now; else
// the one whose lock ends first. Forgetting an account gives its guesser
// at most lockAfter more tries at the start of the schedule. Caller holds mu.
func (l *accountLocks) makeRoom(now time.Time) {
	for _, drop := range []func(*lockState) bool{
		func(st *lockState) bool { return now.Sub(st.last) >= lockForget },
		func(st *lockState) bool { return st.failures < lockAfter },
		func(st *lockState) bool { return !now.Before(st.until) },
	} {
		for u, st := range l.m {
			if st.judging == 0 && drop(st) {
				delete(l.m, u)
			}
		}
		if len(l.m) < maxAccounts {
			return
		}
	}
	first := ""
	for u, st := range l.m {
		if first == "" || st.until.Before(l.m[first].until) {
			first = u
		}
	}
	delete(l.m, first)
}
