package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// waitPod reads the Pod called name (nil when there is none) from the API
// server, then follows its changes with a watch from that read, until done
// says it is done or fails, or ctx ends.
func (e *Engine) waitPod(ctx context.Context, name string, done func(*corev1.Pod) (bool, error)) error {
	api := e.cs.CoreV1().Pods(e.cfg.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		list, err := api.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return fmt.Errorf("get pod %s: %w", name, err)
		}
		var pod *corev1.Pod
		if len(list.Items) > 0 {
			pod = &list.Items[0]
		}
		if ok, err := done(pod); ok || err != nil {
			return err
		}
		w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return fmt.Errorf("watch pod %s: %w", name, err)
		}
		ok, err := follow(ctx, w, done)
		w.Stop()
		if ok || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("wait for pod %s: %w", name, ctx.Err())
		}
	}
}

// follow feeds a watch's Pods to done until it is done, the watch ends
// (false, nil: read again) or ctx does.
func follow(ctx context.Context, w watch.Interface, done func(*corev1.Pod) (bool, error)) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, open := <-w.ResultChan():
			if !open || ev.Type == watch.Error {
				return false, nil
			}
			pod, _ := ev.Object.(*corev1.Pod)
			if pod == nil {
				continue
			}
			if ev.Type == watch.Deleted {
				pod = nil
			}
			if ok, err := done(pod); ok || err != nil {
				return ok, err
			}
		}
	}
}

// podGone waits until the Pod called name is gone.
func (e *Engine) podGone(ctx context.Context, name string) error {
	return e.waitPod(ctx, name, func(p *corev1.Pod) (bool, error) { return p == nil, nil })
}

// claimGone waits until the claim called name is gone (its protection
// finalizer lifts once no Pod uses it).
func (e *Engine) claimGone(ctx context.Context, name string) error {
	api := e.cs.CoreV1().PersistentVolumeClaims(e.cfg.Namespace)
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("wait for claim %s to go: %w", name, err)
	}
	return nil
}
