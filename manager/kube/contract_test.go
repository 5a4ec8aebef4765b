package kube_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/kube"
	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/lifecycle/enginetest"
)

// The engine contract suite on a real API server and etcd, with the test
// playing scheduler, kubelet and volume controllers (kubelet_test.go).
// Each case gets its own namespace, under Pod Security "baseline".
func TestContractKubernetes(t *testing.T) {
	_, cs := apiServer(t)
	enginetest.Run(t, func(t *testing.T) enginetest.Harness {
		ns := namespace(t, cs, "baseline")
		k := startKubelet(t, cs, ns)
		eng, err := kube.New(cs, kube.Config{Namespace: ns, Stack: "affido", Image: "affido/agent:test",
			GatewayURL: "http://gateway:8088", GatewayIP: netip.MustParseAddr("10.96.0.88"), CallerKeyHash: sandboxapi.CallerKeyHash("test caller key"),
			MemoryBytes: 512 << 20, MilliCPU: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return enginetest.Harness{Engine: eng, Stack: "affido", Locate: k.locate, Timeout: 30 * time.Second}
	})
}

// Kubernetes cannot pause, and has no sandbox networks: the engine must
// not pretend to.
func TestEngineHasNeitherPauseNorNetworks(t *testing.T) {
	var eng lifecycle.Engine = &kube.Engine{}
	if _, ok := eng.(lifecycle.Pauser); ok {
		t.Error("the Kubernetes engine claims it can pause")
	}
	if _, ok := eng.(lifecycle.Networks); ok {
		t.Error("the Kubernetes engine claims sandbox networks")
	}
}
