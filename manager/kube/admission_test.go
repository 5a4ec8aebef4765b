package kube_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/kube"
	"github.com/affido/affido/manager/lifecycle"
)

// The manager's Role may create any Pod in the sandbox namespace: before
// deploy/kubernetes/admission.yaml, its service account made a Pod that
// mounted Secrets and one that ran as another service account, and it
// could delete Pods it did not make. And it may make NetworkPolicies: one
// that lets anything in would undo the namespace's default deny. Tried
// here as the manager's service account against the real API server with
// the policy applied: each is refused with the policy's words, while the
// Pod, claims and policy the engine makes are admitted.
func TestManagerMakesOnlyTheAgentsShape(t *testing.T) {
	cfg, cs := apiServer(t)
	st := newStack(t, cfg, cs)
	if cluster := pick(manifests(t), isAdmission); len(cluster) != 2 {
		t.Fatalf("the manifests hold %d admission objects, want the policy and its binding", len(cluster))
	}
	apply(t, cfg, pick(manifests(t), isAdmission), false)
	apply(t, cfg, st.place(pick(manifests(t), func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "NetworkPolicy" && o.GetNamespace() == "affido-sandboxes"
	})), false)
	ns, mcs := st.sandboxes, st.manager
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A Pod the operator made in the sandbox namespace (not the manager).
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod("operators", map[string]string{"app": "debug"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st.waitForPolicy(t)

	managed := map[string]string{lifecycle.LabelManaged: "true", "app.kubernetes.io/name": "affido-agent"}
	secretVolume := pod("steal-secret", managed)
	secretVolume.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "affido-caller"}}}}
	secretEnv := pod("steal-env", managed)
	secretEnv.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "affido-postgres"}, Key: "dsn"}}}}
	otherAccount := pod("other-account", managed)
	otherAccount.Spec.ServiceAccountName = "affido-manager"
	otherAccount.Spec.AutomountServiceAccountToken = ptr(true)
	asCaddy := pod("as-caddy", map[string]string{lifecycle.LabelManaged: "true", "app.kubernetes.io/name": "affido-caddy"})
	for _, c := range []struct {
		p    *corev1.Pod
		want string
	}{
		{secretVolume, "mounts only its claims"},
		{secretEnv, "no environment from a Secret"},
		{otherAccount, "default service account"},
		{pod("unlabelled", nil), "labelled affido.managed=true"},
		{asCaddy, "labelled app.kubernetes.io/name=affido-agent"},
	} {
		if _, err := mcs.CoreV1().Pods(ns).Create(ctx, c.p, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pod %s: %v, want a refusal saying %q", c.p.Name, err, c.want)
		}
	}
	if err := mcs.CoreV1().Pods(ns).Delete(ctx, "operators", metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), "affido.managed=true") {
		t.Errorf("the manager deleting a Pod it did not make: %v", err)
	}

	// NetworkPolicies that would open the sandboxes, each labelled as the
	// manager's own.
	kcfg := kube.Config{Namespace: ns, ControlNamespace: st.control, Stack: "vap", Image: "affido/agent:test",
		GatewayIP: netip.MustParseAddr("10.96.0.10"), CallerKeyHash: sandboxapi.CallerKeyHash("test caller key")}
	n := lifecycle.Names{Stack: "vap", Sandbox: "alice"}
	opened := func(name string, change func(*netv1.NetworkPolicySpec)) *netv1.NetworkPolicy {
		p := kcfg.Policy(n)
		p.Name = name
		change(&p.Spec)
		return p
	}
	for _, p := range []*netv1.NetworkPolicy{
		opened("from-anywhere", func(s *netv1.NetworkPolicySpec) { s.Ingress[0].From = nil }),
		opened("any-port", func(s *netv1.NetworkPolicySpec) { s.Egress[0].Ports = nil }),
		opened("port-range", func(s *netv1.NetworkPolicySpec) { s.Egress[0].Ports[0].EndPort = ptr(int32(65535)) }),
		opened("to-an-address", func(s *netv1.NetworkPolicySpec) {
			s.Egress[0].To = []netv1.NetworkPolicyPeer{{IPBlock: &netv1.IPBlock{CIDR: "0.0.0.0/0"}}}
		}),
		opened("other-sandboxes", func(s *netv1.NetworkPolicySpec) {
			s.Ingress[0].From[0].PodSelector.MatchLabels = map[string]string{"app.kubernetes.io/name": "affido-agent"}
		}),
		opened("any-namespace", func(s *netv1.NetworkPolicySpec) {
			s.Ingress[0].From[0].NamespaceSelector = &metav1.LabelSelector{}
		}),
	} {
		const want = "lets in and out only Caddy's Pods"
		if _, err := mcs.NetworkingV1().NetworkPolicies(ns).Create(ctx, p, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("network policy %s: %v, want a refusal saying %q", p.Name, err, want)
		}
	}
	// The namespace's default deny is not the manager's to change.
	deny, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, "default-deny", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deny.Spec.PolicyTypes = []netv1.PolicyType{netv1.PolicyTypeIngress}
	if _, err := mcs.NetworkingV1().NetworkPolicies(ns).Update(ctx, deny, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "affido.managed=true") {
		t.Errorf("the manager changing the default deny: %v", err)
	}
	if err := mcs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, "default-deny", metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), "affido.managed=true") {
		t.Errorf("the manager deleting the default deny: %v", err)
	}

	// The engine's own claims, policy and Pod pass, and it may delete them.
	eng, err := kube.New(mcs, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.EnsureVolumes(ctx, n); err != nil {
		t.Fatalf("the engine's claims under the policy: %v", err)
	}
	if _, err := eng.Create(ctx, n, netip.Prefix{}); err != nil {
		t.Fatalf("the engine's network policy under the policy: %v", err)
	}
	agent, err := mcs.CoreV1().Pods(ns).Create(ctx, kcfg.Pod(n), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the engine's Pod under the policy: %v", err)
	}
	if err := mcs.CoreV1().Pods(ns).Delete(ctx, agent.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the manager deleting its own Pod under the policy: %v", err)
	}
}

// pod is a minimal Pod that Pod Security "baseline" admits.
func pod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "affido/agent:test"}},
		},
	}
}

func ptr[T any](v T) *T { return &v }
