package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/affido/affido/manager/lifecycle"
)

// Stop deletes the sandbox's Pod (its grace period lets the agent close
// its storage) and waits until it is gone; claims and NetworkPolicy stay.
// A Pod that is gone already is not an error.
func (e *Engine) Stop(ctx context.Context, id string) error {
	n := lifecycle.Names{Stack: e.cfg.Stack, Sandbox: id}
	pod, err := e.cs.CoreV1().Pods(e.cfg.Namespace).Get(ctx, podName(n), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get pod %s: %w", podName(n), err)
	}
	return e.deletePod(ctx, pod)
}

// deletePod deletes this Pod, by its uid (never a newer Pod of the same
// name another manager made meanwhile), and waits until it is gone.
func (e *Engine) deletePod(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	err := e.cs.CoreV1().Pods(e.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	err = e.waitPod(ctx, pod.Name, func(p *corev1.Pod) (bool, error) { return p == nil || p.UID != uid, nil })
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}
