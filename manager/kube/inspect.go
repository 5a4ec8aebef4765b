package kube

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/affido/affido/manager/lifecycle"
)

// Inspect returns the sandbox as the API server has it: its Pod's state,
// stopped when only its NetworkPolicy is left, or
// lifecycle.ErrNotFound when neither is. The id is the sandbox name: a
// Pod is made anew at every start.
func (e *Engine) Inspect(ctx context.Context, n lifecycle.Names) (lifecycle.Container, error) {
	pod, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Get(ctx, podName(n), metav1.GetOptions{})
	if err == nil {
		if sandboxOf(pod.Annotations) != n.Sandbox {
			return lifecycle.Container{}, fmt.Errorf("inspect pod %s: exists but belongs to %q, not %s", pod.Name, sandboxOf(pod.Annotations), n.Sandbox)
		}
		return e.container(n.Sandbox, pod), nil
	}
	if !apierrors.IsNotFound(err) {
		return lifecycle.Container{}, fmt.Errorf("inspect pod %s: %w", podName(n), err)
	}
	_, err = e.cs.NetworkingV1().NetworkPolicies(e.cfg.Namespace).Get(ctx, policyName(n), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return lifecycle.Container{}, lifecycle.ErrNotFound
	case err != nil:
		return lifecycle.Container{}, fmt.Errorf("inspect network policy %s: %w", policyName(n), err)
	}
	return lifecycle.Container{ID: n.Sandbox, Sandbox: n.Sandbox, Status: lifecycle.StatusStopped}, nil
}

// container maps a Pod to the lifecycle's view: running once it is Ready
// with an address (its Endpoint), stopped before that and once it ended or
// is being deleted.
func (e *Engine) container(sandbox string, pod *corev1.Pod) lifecycle.Container {
	c := lifecycle.Container{ID: sandbox, Sandbox: sandbox, Status: podStatus(pod)}
	if c.Status == lifecycle.StatusRunning {
		ip, _ := netip.ParseAddr(pod.Status.PodIP)
		c.Endpoint = netip.AddrPortFrom(ip, e.cfg.AgentPort)
	}
	return c
}

func podStatus(pod *corev1.Pod) lifecycle.Status {
	if !ended(pod) && pod.Status.Phase == corev1.PodRunning && ready(pod) {
		if ip, err := netip.ParseAddr(pod.Status.PodIP); err == nil && ip.IsValid() {
			return lifecycle.StatusRunning
		}
	}
	return lifecycle.StatusStopped
}

// ended reports whether a Pod is over: it finished, failed or is being
// deleted (a start makes a new one), as opposed to one not yet ready.
func ended(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

func ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
