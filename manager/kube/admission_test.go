package kube_test

import (
	"context"
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

// The manager's Role may create any Pod: before deploy/kubernetes/
// admission.yaml, its service account made a Pod that mounted the
// namespace's Secrets (the caller key, the database DSN) and one that ran
// as another service account, and it could delete the control plane's own
// Pods. Tried here as the manager's service account against the real API
// server with the policy applied: each is refused with the policy's words,
// while the Pod the engine makes is admitted.
func TestManagerMakesOnlyTheAgentsShape(t *testing.T) {
	cfg, cs := apiServer(t)
	ns := namespace(t, cs, "baseline")
	all := manifests(t)
	cluster := pick(all, func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "ValidatingAdmissionPolicy" || o.GetKind() == "ValidatingAdmissionPolicyBinding"
	})
	if len(cluster) != 2 {
		t.Fatalf("the manifests hold %d admission objects, want the policy and its binding", len(cluster))
	}
	apply(t, cfg, cluster, false)
	apply(t, cfg, placeIn(pick(all, func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "ServiceAccount" || o.GetKind() == "Role" || o.GetKind() == "RoleBinding"
	}), ns), false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The control plane's own Pod, made by the operator (not the manager).
	caddy := pod("caddy", map[string]string{"app": "caddy"})
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, caddy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":affido-manager"}
	mcs := kubernetes.NewForConfigOrDie(as)
	managed := map[string]string{lifecycle.LabelManaged: "true"}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()

	secretVolume := pod("steal-secret", managed)
	secretVolume.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "affido-caller"}}}}
	secretEnv := pod("steal-env", managed)
	secretEnv.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "affido-postgres"}, Key: "dsn"}}}}
	otherAccount := pod("other-account", managed)
	otherAccount.Spec.ServiceAccountName = "affido-manager"
	otherAccount.Spec.AutomountServiceAccountToken = ptr(true)
	unlabelled := pod("unlabelled", nil)
	for _, c := range []struct {
		p    *corev1.Pod
		want string
	}{
		{secretVolume, "mounts only its claims"},
		{secretEnv, "no environment from a Secret"},
		{otherAccount, "default service account"},
		{unlabelled, "labelled affido.managed=true"},
	} {
		// The policy is compiled and bound in the background: ask again
		// on every tick until it refuses, or the deadline.
		for {
			_, err := mcs.CoreV1().Pods(ns).Create(ctx, c.p, metav1.CreateOptions{})
			if err != nil && strings.Contains(err.Error(), c.want) {
				break
			}
			if err == nil {
				_ = cs.CoreV1().Pods(ns).Delete(ctx, c.p.Name, metav1.DeleteOptions{})
			}
			select {
			case <-ctx.Done():
				t.Fatalf("pod %s: the last answer was %v, want a refusal saying %q", c.p.Name, err, c.want)
			case <-tick.C:
			}
		}
	}
	if err := mcs.CoreV1().Pods(ns).Delete(ctx, "caddy", metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), "affido.managed=true") {
		t.Fatalf("the manager deleting the control plane's Pod: %v", err)
	}

	// The engine's own claims and Pod pass, and it may delete them.
	kcfg := kube.Config{Namespace: ns, Stack: "vap", Image: "affido/agent:test",
		GatewayIP: netip.MustParseAddr("10.96.0.10"), CallerKeyHash: sandboxapi.CallerKeyHash("test caller key")}
	eng, err := kube.New(mcs, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	n := lifecycle.Names{Stack: "vap", Sandbox: "alice"}
	if err := eng.EnsureVolumes(ctx, n); err != nil {
		t.Fatalf("the engine's claims under the policy: %v", err)
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
