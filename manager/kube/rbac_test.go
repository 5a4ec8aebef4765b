package kube_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
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

// The manager's Roles (deploy/kubernetes/rbac.yaml) are enough for all the
// engine does, and the API server enforces them: the engine runs here as
// the manager's service account, with its informer, through a sandbox's
// whole life in the sandbox namespace, under the admission policy and
// beside the namespace's default deny, reading the gateway Service from
// the control namespace.
func TestManagerRoleSuffices(t *testing.T) {
	cfg, cs := apiServer(t)
	st := newStack(t, cfg, cs)
	apply(t, cfg, pick(manifests(t), isAdmission), false)
	apply(t, cfg, st.place(pick(manifests(t), func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "NetworkPolicy"
	})), false)
	st.waitForPolicy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mcs, svc, ns := st.manager, st.gateway, st.sandboxes
	startKubelet(t, cs, ns)
	eng, err := kube.New(mcs, kube.Config{Namespace: ns, ControlNamespace: st.control, Stack: "rbac", Image: "affido/agent:test",
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

// stack is the control plane's namespace and the sandboxes', made fresh
// for one test, with the manifests' service account, Roles, bindings and
// gateway Service in them, and a client that is the manager's service
// account.
type stack struct {
	control, sandboxes string
	manager            kubernetes.Interface
	gateway            *corev1.Service
}

// newStack makes a stack and waits until the API server's authorizer sees
// both of the manager's Roles (it sees a new binding a moment after it is
// made).
func newStack(t *testing.T, cfg *rest.Config, cs kubernetes.Interface) *stack {
	t.Helper()
	st := &stack{control: namespace(t, cs, "restricted"), sandboxes: namespace(t, cs, "baseline")}
	apply(t, cfg, st.place(pick(manifests(t), func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "ServiceAccount" || o.GetKind() == "Role" || o.GetKind() == "RoleBinding" ||
			o.GetKind() == "Service" && o.GetName() == "affido-gateway"
	})), false)
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + st.control + ":affido-manager"}
	st.manager = kubernetes.NewForConfigOrDie(as)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var err error
		st.gateway, err = st.manager.CoreV1().Services(st.control).Get(ctx, "affido-gateway", metav1.GetOptions{})
		if err == nil {
			_, err = st.manager.CoreV1().Pods(st.sandboxes).List(ctx, metav1.ListOptions{})
		}
		if err == nil {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the manager cannot read the gateway Service or list the sandboxes' Pods: %v", err)
		case <-tick.C:
		}
	}
}

// place moves objs from the manifests' namespaces to the stack's: their
// own namespace, a binding's subjects', and a namespace named in a
// NetworkPolicy's selector.
func (st *stack) place(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	to := map[string]string{"affido": st.control, "affido-sandboxes": st.sandboxes}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "namespace" || k == corev1.LabelMetadataName) && to[s] != "" {
					v[k] = to[s]
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, o := range objs {
		walk(o.Object)
	}
	return objs
}

// waitForPolicy waits until the admission policy, compiled and bound in
// the background, refuses the manager an unlabelled Pod in the sandbox
// namespace (a dry run: nothing is stored).
func (st *stack) waitForPolicy(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := st.manager.CoreV1().Pods(st.sandboxes).Create(ctx, pod("probe", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "labelled affido.managed=true") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the admission policy does not hold: the last answer was %v", err)
		case <-tick.C:
		}
	}
}

func isAdmission(o *unstructured.Unstructured) bool {
	return o.GetKind() == "ValidatingAdmissionPolicy" || o.GetKind() == "ValidatingAdmissionPolicyBinding"
}
