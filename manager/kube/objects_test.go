package kube

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/lifecycle"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func testConfig() Config {
	c := Config{Namespace: "affido-sandboxes", ControlNamespace: "affido", Stack: "affido", Image: "affido/agent:dev",
		GatewayURL: "http://gateway:8088", GatewayIP: netip.MustParseAddr("10.96.0.88"), CallerKeyHash: sandboxapi.CallerKeyHash("golden caller key"),
		MemoryBytes: 512 << 20, MilliCPU: 1000, StorageClass: "standard", VolumeSize: resource.MustParse("2Gi"),
		Env: []string{"AFFIDO_MODEL=fake/echo"}}
	c.defaults()
	return c
}

// The objects of a user's sandbox, and of a pool sandbox, as YAML.
func TestObjectsGolden(t *testing.T) {
	c := testConfig()
	for _, sandbox := range []string{"alice", "pool.0123456789abcdef", "Bob_Smith"} {
		n := lifecycle.Names{Stack: c.Stack, Sandbox: sandbox}
		var out []byte
		objs := []any{c.Policy(n)}
		for _, pvc := range c.Claims(n) {
			objs = append(objs, pvc)
		}
		objs = append(objs, c.Pod(n))
		for _, o := range objs {
			b, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			out = append(append(out, "---\n"...), b...)
		}
		golden := filepath.Join("testdata", key(sandbox)+".golden")
		if *update {
			if err := os.WriteFile(golden, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./manager/kube -run Golden -update)", err)
		}
		if string(want) != string(out) {
			t.Errorf("%s: objects differ from %s (run with -update after checking the change):\n%s", sandbox, golden, out)
		}
	}
}

// Keys are valid names and label values, and distinct for distinct names.
func TestKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"alice", "alice"},
		{"pool.0123456789abcdef", "pool-0123456789abcdef-"},
		{"Alice", "alice-"},
		{"alice_", "alice-"},
		{"__", "s-"},
	}
	for _, tt := range tests {
		got := key(tt.in)
		if len(got) < len(tt.want) || got[:len(tt.want)] != tt.want {
			t.Errorf("key(%q) = %q, want prefix %q", tt.in, got, tt.want)
		}
		if len(got) > 63 {
			t.Errorf("key(%q) = %q: longer than a label value may be", tt.in, got)
		}
	}
	if key("Alice") == key("alice") || key("a_b") == key("a-b") {
		t.Error("two sandbox names share a key")
	}
	long := key("x123456789012345678901234567890123456789012345678901234567890123")
	if len(long) > 63 {
		t.Errorf("long key %q", long)
	}
}
