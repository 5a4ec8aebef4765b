package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/affido/affido/manager/lifecycle"
)

// Events follows the stack's Pods with an informer and turns their changes
// into the lifecycle's events: EventStarted when a Pod becomes Ready, EventDied
// when it ends or goes (the lifecycle tells a death from its own stop).
// The events only say where to look again: the lifecycle then asks the API
// server, never the informer's cache. The stream ends with ctx.
func (e *Engine) Events(ctx context.Context) (<-chan lifecycle.Event, <-chan error) {
	out := make(chan lifecycle.Event, 64)
	errc := make(chan error, 1)
	f := informers.NewSharedInformerFactoryWithOptions(e.cs, 0, informers.WithNamespace(e.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = e.selector() }))
	send := func(pod *corev1.Pod, kind lifecycle.EventKind) {
		select {
		case out <- lifecycle.Event{Sandbox: sandboxOf(pod.Annotations), Kind: kind}:
		case <-ctx.Done():
		}
	}
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, _ := oldObj.(*corev1.Pod)
			pod, _ := newObj.(*corev1.Pod)
			if old == nil || pod == nil {
				return
			}
			switch {
			case podStatus(pod) == lifecycle.StatusRunning && podStatus(old) != lifecycle.StatusRunning:
				send(pod, lifecycle.EventStarted)
			case ended(pod) && !ended(old):
				send(pod, lifecycle.EventDied)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok && !ended(pod) {
				send(pod, lifecycle.EventDied)
			}
		},
	})
	if err != nil {
		errc <- err
		close(out)
		return out, errc
	}
	f.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		f.Shutdown()
		errc <- ctx.Err()
	}()
	return out, errc
}
