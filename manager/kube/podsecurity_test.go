package kube_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/kube"
	"github.com/affido/affido/manager/lifecycle"
)

// The sandbox Pod is admitted by the real Pod Security admission under
// "baseline" and refused under "restricted", for exactly the root start
// and the two capabilities privilege separation needs (agent/privsep).
func TestPodSecurityLevel(t *testing.T) {
	_, cs := apiServer(t)
	ctx := context.Background()
	for _, tt := range []struct {
		level string
		admit bool
	}{{"baseline", true}, {"restricted", false}} {
		ns := namespace(t, cs, tt.level)
		c := kube.Config{Namespace: ns, Stack: "affido", Image: "affido/agent:test", CallerKeyHash: sandboxapi.CallerKeyHash("test caller key"), MemoryBytes: 512 << 20, MilliCPU: 500}
		pod := c.Pod(lifecycle.Names{Stack: "affido", Sandbox: "alice"})
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case tt.admit && err != nil:
			t.Errorf("%s: the sandbox Pod was refused: %v", tt.level, err)
		case !tt.admit && !apierrors.IsForbidden(err):
			t.Errorf("%s: the sandbox Pod was not refused (err %v)", tt.level, err)
		case !tt.admit:
			for _, why := range []string{"runAsNonRoot", "SETUID", "SETGID"} {
				if !strings.Contains(err.Error(), why) {
					t.Errorf("%s refused it, but not for %s: %v", tt.level, why, err)
				}
			}
		}
	}
}
