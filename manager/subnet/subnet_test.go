package subnet

import (
	"errors"
	"net/netip"
	"testing"
)

func TestAllocate(t *testing.T) {
	pool := netip.MustParsePrefix("10.213.0.0/24")
	p := netip.MustParsePrefix
	tests := []struct {
		name string
		used []netip.Prefix
		want string
	}{
		{"empty pool gives the first slot", nil, "10.213.0.0/28"},
		{"skips taken slots", []netip.Prefix{p("10.213.0.0/28"), p("10.213.0.16/28")}, "10.213.0.32/28"},
		{"fills a hole", []netip.Prefix{p("10.213.0.0/28"), p("10.213.0.32/28")}, "10.213.0.16/28"},
		{"a larger foreign network blocks every slot it covers", []netip.Prefix{p("10.213.0.0/26")}, "10.213.0.64/28"},
		{"outside the pool is ignored", []netip.Prefix{p("10.9.0.0/16")}, "10.213.0.0/28"},
		{"unmasked prefixes are masked", []netip.Prefix{p("10.213.0.5/28")}, "10.213.0.16/28"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Allocate(pool, 28, tt.used)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Fatalf("Allocate = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAllocateExhausted(t *testing.T) {
	pool := netip.MustParsePrefix("10.213.0.0/26")
	var used []netip.Prefix
	for i := 0; i < Capacity(pool, 28); i++ {
		got, err := Allocate(pool, 28, used)
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		used = append(used, got)
	}
	if _, err := Allocate(pool, 28, used); !errors.Is(err, ErrExhausted) {
		t.Fatalf("full pool: err = %v, want ErrExhausted", err)
	}
}

func TestAllocateRejectsBadSizes(t *testing.T) {
	for _, bits := range []int{8, 31, 32} {
		if _, err := Allocate(netip.MustParsePrefix("10.0.0.0/16"), bits, nil); err == nil {
			t.Errorf("/%d in a /16: no error", bits)
		}
	}
	if _, err := Allocate(netip.MustParsePrefix("fd00::/64"), 120, nil); err == nil {
		t.Error("IPv6 pool: no error")
	}
}

func TestCapacityOfDefaultPool(t *testing.T) {
	if got := Capacity(netip.MustParsePrefix("10.213.0.0/16"), 28); got != 4096 {
		t.Fatalf("capacity = %d, want 4096", got)
	}
}

func TestAddressesInSubnet(t *testing.T) {
	sn := netip.MustParsePrefix("10.213.0.16/28")
	if got := SandboxIP(sn).String(); got != "10.213.0.18" {
		t.Errorf("SandboxIP = %s", got)
	}
	if got := GatewayIP(sn).String(); got != "10.213.0.30" {
		t.Errorf("GatewayIP = %s", got)
	}
}
