package kube

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/affido/affido/manager/provision"
)

// Inspect returns the sandbox as the API server has it: its Pod's state,
// "exited" when only its NetworkPolicy is left (stopped), or
// provision.ErrNotFound when neither is. The id is the sandbox name: a
// Pod is made anew at every start.
func (e *Engine) Inspect(ctx context.Context, n provision.Names) (provision.Container, error) {
	pod, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Get(ctx, podName(n), metav1.GetOptions{})
	if err == nil {
		if sandboxOf(pod.Annotations) != n.Sandbox {
			return provision.Container{}, fmt.Errorf("inspect pod %s: exists but belongs to %q, not %s", pod.Name, sandboxOf(pod.Annotations), n.Sandbox)
		}
		return e.container(n.Sandbox, pod), nil
	}
	if !apierrors.IsNotFound(err) {
		return provision.Container{}, fmt.Errorf("inspect pod %s: %w", podName(n), err)
	}
	_, err = e.cs.NetworkingV1().NetworkPolicies(e.cfg.Namespace).Get(ctx, policyName(n), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return provision.Container{}, provision.ErrNotFound
	case err != nil:
		return provision.Container{}, fmt.Errorf("inspect network policy %s: %w", policyName(n), err)
	}
	return provision.Container{ID: n.Sandbox, Sandbox: n.Sandbox, Status: "exited"}, nil
}

// container maps a Pod to the lifecycle's view: "running" once it is Ready
// with an address (its Endpoint), "exited" once it ended or is being
// deleted, "created" before.
func (e *Engine) container(sandbox string, pod *corev1.Pod) provision.Container {
	c := provision.Container{ID: sandbox, Sandbox: sandbox, Status: podStatus(pod)}
	if c.Status == "running" {
		ip, _ := netip.ParseAddr(pod.Status.PodIP)
		c.Endpoint = netip.AddrPortFrom(ip, e.cfg.AgentPort)
	}
	return c
}

func podStatus(pod *corev1.Pod) string {
	switch {
	case pod.DeletionTimestamp != nil, pod.Status.Phase == corev1.PodFailed, pod.Status.Phase == corev1.PodSucceeded:
		return "exited"
	case pod.Status.Phase == corev1.PodRunning && ready(pod):
		if ip, err := netip.ParseAddr(pod.Status.PodIP); err == nil && ip.IsValid() {
			return "running"
		}
	}
	return "created"
}

func ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
