// Package subnet allocates per-user sandbox subnets from a configured pool.
package subnet

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
)

// ErrExhausted is returned when every subnet of the pool is taken.
var ErrExhausted = errors.New("sandbox subnet pool exhausted")

// Allocate returns the first /bits subnet of pool that overlaps none of used.
// Prefixes in used that lie outside the pool are ignored.
func Allocate(pool netip.Prefix, bits int, used []netip.Prefix) (netip.Prefix, error) {
	pool = pool.Masked()
	if !pool.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("allocate subnet: pool %s is not IPv4", pool)
	}
	if bits < pool.Bits() || bits > 30 {
		return netip.Prefix{}, fmt.Errorf("allocate subnet: /%d does not fit in pool %s (need /%d to /30)", bits, pool, pool.Bits())
	}
	count := 1 << (bits - pool.Bits())
	taken := make(map[int]bool, len(used))
	for _, u := range used {
		if !pool.Overlaps(u) {
			continue
		}
		// Mark every slot u overlaps; u may be larger or smaller than one slot.
		lo, hi := index(pool, bits, u.Masked().Addr()), index(pool, bits, last(u))
		for i := max(lo, 0); i <= min(hi, count-1); i++ {
			taken[i] = true
		}
	}
	for i := 0; i < count; i++ {
		if !taken[i] {
			return slot(pool, bits, i), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("allocate /%d in %s (%d subnets): %w", bits, pool, count, ErrExhausted)
}

// Capacity is the number of /bits subnets in pool.
func Capacity(pool netip.Prefix, bits int) int { return 1 << (bits - pool.Bits()) }

func toInt(a netip.Addr) *big.Int { b := a.As4(); return new(big.Int).SetBytes(b[:]) }

func index(pool netip.Prefix, bits int, a netip.Addr) int {
	if a.Less(pool.Addr()) {
		return -1
	}
	off := new(big.Int).Sub(toInt(a), toInt(pool.Addr()))
	return int(off.Int64() >> (32 - bits))
}

func slot(pool netip.Prefix, bits, i int) netip.Prefix {
	base := toInt(pool.Addr()).Int64() + int64(i)<<(32-bits)
	b := [4]byte{byte(base >> 24), byte(base >> 16), byte(base >> 8), byte(base)}
	return netip.PrefixFrom(netip.AddrFrom4(b), bits)
}

func last(p netip.Prefix) netip.Addr {
	p = p.Masked()
	v := toInt(p.Addr()).Int64() | (int64(1)<<(32-p.Bits()) - 1)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// SandboxIP is the fixed address of the agent inside its subnet: the bridge
// takes the first address, the agent the second, the gateway (Caddy) the
// last (GatewayIP).
func SandboxIP(subnet netip.Prefix) netip.Addr { return subnet.Masked().Addr().Next().Next() }

// GatewayIP is Caddy's fixed address on a user network: the subnet's last
// usable address, so it never takes the agent's.
func GatewayIP(subnet netip.Prefix) netip.Addr {
	p := subnet.Masked()
	b := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 2 // broadcast - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
