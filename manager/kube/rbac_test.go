package kube_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/kube"
	"github.com/affido/affido/manager/lifecycle"
)

// The manager's Role (deploy/kubernetes/rbac.yaml) is enough for all the
// engine does, and the API server enforces it: the engine runs here as the
// manager's service account, with its informer, through a sandbox's whole
// life.
func TestManagerRoleSuffices(t *testing.T) {
	cfg, cs := apiServer(t)
	// The manifests' service account, Role, binding and gateway Service,
	// made for real in a namespace of this test's own.
	ns := namespace(t, cs, "baseline")
	objs := pick(manifests(t), func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "ServiceAccount" || o.GetKind() == "Role" || o.GetKind() == "RoleBinding" ||
			o.GetKind() == "Service" && o.GetName() == "affido-gateway"
	})
	apply(t, cfg, placeIn(objs, ns), false)
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":affido-manager"}
	mcs := kubernetes.NewForConfigOrDie(as)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := mcs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the manager may read secrets")
	}
	// The API server's authorizer sees a new Role and binding a moment
	// after they are made: ask until it does, within the deadline.
	var svc *corev1.Service
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var err error
		if svc, err = mcs.CoreV1().Services(ns).Get(ctx, "affido-gateway", metav1.GetOptions{}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the manager cannot read the gateway Service: %v", err)
		case <-tick.C:
		}
	}
	startKubelet(t, cs, ns)
	eng, err := kube.New(mcs, kube.Config{Namespace: ns, Stack: "rbac", Image: "affido/agent:test",
		GatewayIP: netip.MustParseAddr(svc.Spec.ClusterIP), CallerKeyHash: sandboxapi.CallerKeyHash("test caller key")})
	if err != nil {
		t.Fatal(err)
	}
	events, _ := eng.Events(ctx)
	n := lifecycle.Names{Stack: "rbac", Sandbox: "alice"}
	if err := eng.EnsureVolumes(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Create(ctx, n, netip.Prefix{}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx, n.Sandbox); err != nil {
		t.Fatal(err)
	}
	if c, err := eng.Inspect(ctx, n); err != nil || c.Status != "running" || !c.Endpoint.IsValid() {
		t.Fatalf("inspect after start: %+v, %v", c, err)
	}
	if inv, err := eng.List(ctx); err != nil || len(inv.Containers["alice"]) != 1 || len(inv.Volumes["alice"]) != 2 {
		t.Fatalf("list: %+v, %v", inv, err)
	}
	if err := eng.Stop(ctx, n.Sandbox); err != nil {
		t.Fatal(err)
	}
	// The informer lists and watches Pods as the service account: by now
	// it has seen alice's Pod become ready, or at least go.
	for seen := false; !seen; {
		select {
		case ev := <-events:
			seen = ev.Sandbox == "alice" && (ev.Kind == lifecycle.EventStarted || ev.Kind == lifecycle.EventDied)
		case <-ctx.Done():
			t.Fatal("no event from the informer")
		}
	}
	if err := eng.RemoveAll(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Inspect(ctx, n); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Fatalf("after RemoveAll: %v", err)
	}
}

// placeIn moves objs (and the subjects of a binding) into namespace ns.
func placeIn(objs []*unstructured.Unstructured, ns string) []*unstructured.Unstructured {
	for _, o := range objs {
		o.SetNamespace(ns)
		if subjects, ok := o.Object["subjects"].([]any); ok {
			for _, sub := range subjects {
				sub.(map[string]any)["namespace"] = ns
			}
		}
	}
	return objs
}
