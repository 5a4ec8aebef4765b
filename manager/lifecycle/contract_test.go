package lifecycle_test

import (
	"testing"

	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/lifecycle/enginetest"
)

// The engine contract suite on the in-memory engine, shaped like Docker
// and like an engine that can neither pause nor make networks (the shape
// of Kubernetes, whose own run is in manager/kube).
func TestContractFakeEngine(t *testing.T) {
	for _, shape := range []struct {
		name string
		bare bool
	}{{"DockerShaped", false}, {"WithoutPauseOrNetworks", true}} {
		t.Run(shape.name, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) enginetest.Harness {
				eng, locate, volumes := lifecycle.NewFakeEngine(shape.bare)
				return enginetest.Harness{Engine: eng, Stack: "t", Locate: locate, Volumes: volumes}
			})
		})
	}
}
