package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/affido/affido/manager/lifecycle"
)

// Start makes the sandbox's Pod (its NetworkPolicy first, if a start finds
// it gone) and waits until the Pod runs, Ready with an address. A Pod
// left from an earlier life (ended, or being deleted) is waited out and
// replaced; one another manager made meanwhile is taken as it is.
func (e *Engine) Start(ctx context.Context, id string) error {
	n := lifecycle.Names{Stack: e.cfg.Stack, Sandbox: id}
	if err := e.ensurePolicy(ctx, n); err != nil {
		return err
	}
	want := e.cfg.Pod(n)
	api := e.cs.CoreV1().Pods(e.cfg.Namespace)
	for {
		_, err := api.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create pod %s: %w", want.Name, err)
		}
		have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get pod %s: %w", want.Name, err)
		}
		if !ended(have) {
			break // starting or running: wait for it below
		}
		if err := e.deletePod(ctx, have); err != nil {
			return err
		}
	}
	err := e.waitPod(ctx, want.Name, func(p *corev1.Pod) (bool, error) {
		if p == nil || ended(p) {
			return false, fmt.Errorf("start pod %s: %w", want.Name, ErrNotRunning)
		}
		return podStatus(p) == lifecycle.StatusRunning, nil
	})
	if err != nil {
		return fmt.Errorf("start pod %s: %w", want.Name, err)
	}
	return nil
}
