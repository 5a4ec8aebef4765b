package provision_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/lifecycle/enginetest"
	"github.com/affido/affido/manager/provision"
)

// TestContractDocker runs the engine contract suite against a real Docker
// engine (DOCKER_HOST), with the agent image (AFFIDO_AGENT_IMAGE, default
// affido/agent:dev) in real containers; the suite's agents are fakes that
// answer for whichever container runs at an address. It runs only with
// AFFIDO_TEST_DOCKER=1, and removes what each case made.
func TestContractDocker(t *testing.T) {
	if os.Getenv("AFFIDO_TEST_DOCKER") != "1" {
		t.Skip("set AFFIDO_TEST_DOCKER=1 to run the contract suite against Docker")
	}
	image := os.Getenv("AFFIDO_AGENT_IMAGE")
	if image == "" {
		image = "affido/agent:dev"
	}
	pool := netip.MustParsePrefix("10.216.0.0/16")
	if p := os.Getenv("AFFIDO_TEST_DOCKER_POOL"); p != "" {
		pool = netip.MustParsePrefix(p)
	}
	const maxCases = 16 // each case has a stack of its own and a /20 of the pool
	newDocker := func(t *testing.T, stack string) *provision.Docker {
		d, err := provision.NewDocker(provision.Config{Stack: stack, Image: image, AgentPort: 8080,
			GatewayURL: "http://gateway:8088", MemoryBytes: 256 << 20, NanoCPUs: 5e8, PidsLimit: 128})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// What a run cut short left (a failed cleanup, a killed test) would
	// hold the pool's subnets: remove it first.
	for i := 1; i <= maxCases; i++ {
		d := newDocker(t, fmt.Sprintf("affidoct%d", i))
		removeStack(t, d, fmt.Sprintf("affidoct%d", i))
		d.Close()
	}
	cases := 0
	enginetest.Run(t, func(t *testing.T) enginetest.Harness {
		cases++
		if cases > maxCases {
			t.Fatalf("more than %d cases: give the harness more stacks", maxCases)
		}
		stack := fmt.Sprintf("affidoct%d", cases)
		d := newDocker(t, stack)
		ctx := context.Background()
		if err := d.CheckImage(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			defer d.Close()
			removeStack(t, d, stack)
		})
		locate := func(ep netip.AddrPort) (string, bool) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			inv, err := d.List(ctx)
			if err != nil {
				return "", false
			}
			for name := range inv.Containers {
				c, err := d.Inspect(ctx, lifecycle.Names{Stack: stack, Sandbox: name})
				if err == nil && c.Status == lifecycle.StatusRunning && c.Endpoint.Addr() == ep.Addr() {
					return name, true
				}
			}
			return "", false
		}
		// A /20 of the pool per case, so one case's leftovers never
		// overlap the next one's networks.
		base := pool.Addr().As4()
		base[2] += byte(16 * (cases - 1))
		subnets := netip.PrefixFrom(netip.AddrFrom4(base), 20)
		return enginetest.Harness{Engine: d, Stack: stack, Locate: locate, Subnets: subnets, Timeout: 60 * time.Second}
	})
}

// removeStack removes every object of stack. The engine may still be
// removing a container the lifecycle's remove tier asked for when the case
// ended ("removal already in progress"): it polls until all is gone, for
// up to a minute.
func removeStack(t *testing.T, d *provision.Docker, stack string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		inv, err := d.List(ctx)
		var failed error
		if err == nil {
			for _, name := range inv.Names() {
				if err := d.RemoveAll(ctx, lifecycle.Names{Stack: stack, Sandbox: name}); err != nil {
					failed = fmt.Errorf("remove %s/%s: %w", stack, name, err)
				}
			}
		} else {
			failed = fmt.Errorf("list %s: %w", stack, err)
		}
		if failed == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%v", failed)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
