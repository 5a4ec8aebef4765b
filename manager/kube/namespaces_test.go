package kube_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/kube"
	"github.com/affido/affido/manager/lifecycle"
)

// The sandboxes live in a namespace of their own; in the control plane's
// the manager may only read the gateway Service's address. Tried as the
// manager's service account against the real API server: everything else
// there is refused by RBAC, and so is every Secret in either namespace.
func TestManagerCannotTouchTheControlPlane(t *testing.T) {
	cfg, cs := apiServer(t)
	st := newStack(t, cfg, cs)
	apply(t, cfg, st.place(pick(manifests(t), func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "NetworkPolicy"
	})), false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range []string{st.control, st.sandboxes} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "affido-control"}, StringData: map[string]string{"key": "not for the manager"}}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m := st.manager
	kcfg := kube.Config{Namespace: st.control, Stack: "ctl", Image: "affido/agent:test", CallerKeyHash: sandboxapi.CallerKeyHash("test caller key")}
	n := lifecycle.Names{Stack: "ctl", Sandbox: "alice"}
	caddyPolicy, err := cs.NetworkingV1().NetworkPolicies(st.control).Get(ctx, "affido-caddy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opened := caddyPolicy.DeepCopy()
	opened.Spec.Ingress = append(opened.Spec.Ingress, netv1.NetworkPolicyIngressRule{}) // from anywhere, to any port
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "more"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "affido-manager", Namespace: st.control}}}
	type attempt struct {
		what string
		try  func() error
	}
	var secrets []attempt
	for _, ns := range []string{st.control, st.sandboxes} {
		secrets = append(secrets, attempt{"read a Secret in " + ns, func() error {
			_, err := m.CoreV1().Secrets(ns).Get(ctx, "affido-control", metav1.GetOptions{})
			return err
		}}, attempt{"list the Secrets in " + ns, func() error {
			_, err := m.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		}})
	}
	for _, c := range append(secrets, []attempt{
		{"create the agent's Pod in the control namespace", func() error {
			_, err := m.CoreV1().Pods(st.control).Create(ctx, kcfg.Pod(n), metav1.CreateOptions{})
			return err
		}},
		{"list the control namespace's Pods", func() error {
			_, err := m.CoreV1().Pods(st.control).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"open the NetworkPolicy that guards Caddy", func() error {
			_, err := m.NetworkingV1().NetworkPolicies(st.control).Update(ctx, opened, metav1.UpdateOptions{})
			return err
		}},
		{"delete the NetworkPolicy that guards Caddy", func() error {
			return m.NetworkingV1().NetworkPolicies(st.control).Delete(ctx, "affido-caddy", metav1.DeleteOptions{})
		}},
		{"delete the NetworkPolicy that guards the manager", func() error {
			return m.NetworkingV1().NetworkPolicies(st.control).Delete(ctx, "affido-manager", metav1.DeleteOptions{})
		}},
		{"add a NetworkPolicy to the control namespace", func() error {
			p := opened.DeepCopy()
			p.ObjectMeta = metav1.ObjectMeta{Name: "more", Labels: map[string]string{lifecycle.LabelManaged: "true"}}
			_, err := m.NetworkingV1().NetworkPolicies(st.control).Create(ctx, p, metav1.CreateOptions{})
			return err
		}},
		{"change the gateway Service", func() error {
			svc := st.gateway.DeepCopy()
			svc.Spec.Selector = map[string]string{"app.kubernetes.io/name": "affido-agent"}
			_, err := m.CoreV1().Services(st.control).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		}},
		{"grant itself more in the sandbox namespace", func() error {
			_, err := m.RbacV1().RoleBindings(st.sandboxes).Create(ctx, binding, metav1.CreateOptions{})
			return err
		}},
		{"lower the sandbox namespace's Pod Security", func() error {
			ns, err := cs.CoreV1().Namespaces().Get(ctx, st.sandboxes, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ns.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
			_, err = m.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
			return err
		}},
	}...) {
		if err := c.try(); !apierrors.IsForbidden(err) {
			t.Errorf("the manager may %s: %v, want forbidden", c.what, err)
		}
	}
}

// The sandbox namespace is shut by default and each sandbox's policy opens
// it for one Pod, to Caddy alone. The test API server runs no network
// plugin, so nothing here shows a packet dropped: it reads the policies
// and namespaces the API server stored, and the Pods it admitted (the
// control plane's made from the manifests' Deployments, under Pod Security
// "restricted"; the sandboxes' made by the manager), and decides each
// connection under the NetworkPolicy API's rules (netView).
func TestSandboxNamespaceIsShutByDefault(t *testing.T) {
	cfg, cs := apiServer(t)
	st := newStack(t, cfg, cs)
	all := manifests(t)
	apply(t, cfg, st.place(pick(all, func(o *unstructured.Unstructured) bool { return o.GetKind() == "NetworkPolicy" })), false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	made := func(c interface {
		Create(context.Context, *corev1.Pod, metav1.CreateOptions) (*corev1.Pod, error)
	}, p *corev1.Pod) *corev1.Pod {
		t.Helper()
		got, err := c.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		return got
	}
	control := func(deployment string) *corev1.Pod {
		for _, o := range st.place(pick(all, func(o *unstructured.Unstructured) bool {
			return o.GetKind() == "Deployment" && o.GetName() == deployment
		})) {
			tmpl, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
			p := &corev1.Pod{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, p); err != nil {
				t.Fatal(err)
			}
			p.Name = deployment
			return made(cs.CoreV1().Pods(st.control), p)
		}
		t.Fatalf("no Deployment %s in the manifests", deployment)
		return nil
	}
	caddy, manager := control("affido-caddy"), control("affido-manager")

	kcfg := kube.Config{Namespace: st.sandboxes, ControlNamespace: st.control, Stack: "net", Image: "affido/agent:test",
		GatewayIP: netip.MustParseAddr(st.gateway.Spec.ClusterIP), CallerKeyHash: sandboxapi.CallerKeyHash("test caller key")}
	eng, err := kube.New(st.manager, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	sandbox := func(name string, policy bool) *corev1.Pod {
		n := lifecycle.Names{Stack: "net", Sandbox: name}
		if policy {
			if _, err := eng.Create(ctx, n, netip.Prefix{}); err != nil {
				t.Fatal(err)
			}
		}
		return made(st.manager.CoreV1().Pods(st.sandboxes), kcfg.Pod(n))
	}
	alice, bob := sandbox("alice", true), sandbox("bob", true)
	carol := sandbox("carol", false) // a Pod whose policy is missing
	impostor := pod("impostor", map[string]string{"app.kubernetes.io/name": "affido-caddy"})
	impostor = made(cs.CoreV1().Pods(st.sandboxes), impostor)

	view := netView{t: t, namespaces: map[string]labels.Set{}}
	for _, ns := range []string{st.control, st.sandboxes} {
		got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		view.namespaces[ns] = got.Labels
		ps, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		view.policies = append(view.policies, ps.Items...)
	}
	deny := view.policy(st.sandboxes, "default-deny")
	for _, p := range []*corev1.Pod{alice, bob, carol, impostor} {
		if !view.selects(deny.Spec.PodSelector, p.Labels) || !slices.Equal(deny.Spec.PolicyTypes, []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress}) {
			t.Errorf("the default deny (%+v) does not shut %s both ways", deny.Spec, p.Name)
		}
	}
	for _, c := range []struct {
		from, to *corev1.Pod
		port     int32
		want     bool
	}{
		{caddy, alice, 8080, true}, // users and the manager's control path, through Caddy
		{alice, caddy, 8088, true}, // the gateway
		{manager, caddy, 8081, true},
		{caddy, alice, 8081, false},
		{caddy, carol, 8080, false},
		{carol, caddy, 8088, false},
		{alice, caddy, 8081, false}, // Caddy's control listener
		{alice, caddy, 8080, false},
		{alice, manager, 9090, false},
		{manager, alice, 8080, false},
		{alice, bob, 8080, false},
		{bob, alice, 8080, false},
		{alice, impostor, 8088, false}, // a Pod labelled as Caddy, outside the control namespace
		{impostor, alice, 8080, false},
	} {
		if got := view.allows(c.from, c.to, c.port); got != c.want {
			t.Errorf("%s/%s -> %s/%s:%d: allowed %v, want %v", c.from.Namespace, c.from.Name, c.to.Namespace, c.to.Name, c.port, got, c.want)
		}
	}
}

// netView decides whether stored NetworkPolicies let one Pod open a TCP
// connection to another's port, by the NetworkPolicy API's rules: a Pod
// selected by no policy of a direction is open that way; a selected one
// only to what some rule of a selecting policy allows; a connection needs
// both the sender's egress and the receiver's ingress. It reads objects; it
// enforces nothing (that is the network plugin's part).
type netView struct {
	t          *testing.T
	policies   []netv1.NetworkPolicy
	namespaces map[string]labels.Set
}

func (v netView) allows(from, to *corev1.Pod, port int32) bool {
	return v.open(from, to, port, netv1.PolicyTypeEgress) && v.open(to, from, port, netv1.PolicyTypeIngress)
}

// open says whether self's policies of direction dir let peer through on port.
func (v netView) open(self, peer *corev1.Pod, port int32, dir netv1.PolicyType) bool {
	isolated := false
	for _, p := range v.policies {
		if p.Namespace != self.Namespace || !slices.Contains(p.Spec.PolicyTypes, dir) || !v.selects(p.Spec.PodSelector, self.Labels) {
			continue
		}
		isolated = true
		if dir == netv1.PolicyTypeIngress {
			for _, r := range p.Spec.Ingress {
				if v.peers(p.Namespace, r.From, peer) && v.ports(r.Ports, port) {
					return true
				}
			}
			continue
		}
		for _, r := range p.Spec.Egress {
			if v.peers(p.Namespace, r.To, peer) && v.ports(r.Ports, port) {
				return true
			}
		}
	}
	return !isolated
}

func (v netView) peers(policyNamespace string, peers []netv1.NetworkPolicyPeer, pod *corev1.Pod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			v.t.Fatalf("netView reads no ipBlock peers")
		}
		inNamespace := pod.Namespace == policyNamespace
		if p.NamespaceSelector != nil {
			inNamespace = v.selects(*p.NamespaceSelector, v.namespaces[pod.Namespace])
		}
		if inNamespace && (p.PodSelector == nil || v.selects(*p.PodSelector, pod.Labels)) {
			return true
		}
	}
	return false
}

func (v netView) ports(ports []netv1.NetworkPolicyPort, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.Type != intstr.Int {
			v.t.Fatalf("netView reads no named ports (%s)", p.Port.StrVal)
		}
		if p.Port.IntVal == port || p.EndPort != nil && p.Port.IntVal <= port && port <= *p.EndPort {
			return true
		}
	}
	return false
}

func (v netView) selects(sel metav1.LabelSelector, set labels.Set) bool {
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		v.t.Fatalf("selector %+v: %v", sel, err)
	}
	return s.Matches(set)
}

func (v netView) policy(namespace, name string) netv1.NetworkPolicy {
	for _, p := range v.policies {
		if p.Namespace == namespace && p.Name == name {
			return p
		}
	}
	v.t.Fatalf("no NetworkPolicy %s/%s", namespace, name)
	return netv1.NetworkPolicy{}
}
