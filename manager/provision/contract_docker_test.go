package provision_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

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
	cases := 0
	enginetest.Run(t, func(t *testing.T) enginetest.Harness {
		cases++
		stack := fmt.Sprintf("affidoct%d", cases)
		d, err := provision.NewDocker(provision.Config{Stack: stack, Image: image, AgentPort: 8080,
			GatewayURL: "http://gateway:8088", MemoryBytes: 256 << 20, NanoCPUs: 5e8, PidsLimit: 128})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := d.CheckImage(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			defer d.Close()
			inv, err := d.List(ctx)
			if err != nil {
				t.Errorf("list %s: %v", stack, err)
				return
			}
			for _, name := range inv.Names() {
				if err := d.RemoveAll(ctx, provision.Names{Stack: stack, Sandbox: name}); err != nil {
					t.Errorf("remove %s/%s: %v", stack, name, err)
				}
			}
		})
		locate := func(ep netip.AddrPort) (string, bool) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			inv, err := d.List(ctx)
			if err != nil {
				return "", false
			}
			for name := range inv.Containers {
				c, err := d.Inspect(ctx, provision.Names{Stack: stack, Sandbox: name})
				if err == nil && c.Running() && c.Endpoint.Addr() == ep.Addr() {
					return name, true
				}
			}
			return "", false
		}
		return enginetest.Harness{Engine: d, Stack: stack, Locate: locate, Subnets: pool, Timeout: 60 * time.Second}
	})
}
