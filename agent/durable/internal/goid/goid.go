// Package goid tells the DB facades which goroutine runs a transaction's
// callback, so a nested call from it is refused (it would wait for itself
// forever) while a call of another goroutine waits its turn.
package goid

import (
	"bytes"
	"runtime"
	"strconv"
)

// Current returns the calling goroutine's id, read from its stack header
// ("goroutine N [...").
func Current() uint64 {
	var buf [32]byte
	n := runtime.Stack(buf[:], false)
	f := bytes.Fields(buf[:n])
	if len(f) < 2 {
		return 0
	}
	id, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return id
}
