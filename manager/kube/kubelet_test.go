package kube_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// kubelet plays what the test API server has no one for: the scheduler
// (binds Pods to a fake Node), the kubelet (marks a bound Pod Running and
// Ready with an address from a fake pod range, and finishes a graceful
// deletion at once, as if the agent stopped within its grace period) and
// the volume controllers (binds claims, lifts a deleted claim's protection
// finalizer). It also knows which agent "listens" where: a Pod it runs is
// keyed by its session claim's uid, since a real agent keeps its identity
// on that volume.
type kubelet struct {
	cs kubernetes.Interface
	ns string

	mu     sync.Mutex
	next   netip.Addr
	listen map[netip.Addr]string // pod IP -> session claim uid
	byPod  map[types.UID]netip.Addr
}

func startKubelet(t *testing.T, cs kubernetes.Interface, ns string) *kubelet {
	t.Helper()
	k := &kubelet{cs: cs, ns: ns, next: netip.MustParseAddr("10.244.0.2"), listen: map[netip.Addr]string{}, byPod: map[types.UID]netip.Addr{}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fake-node"}}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); follow(ctx, k.listPods, k.watchPods, k.pod) }()
	go func() { defer wg.Done(); follow(ctx, k.listClaims, k.watchClaims, k.claim) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return k
}

// locate says which agent listens at ep, and whether it runs.
func (k *kubelet) locate(ep netip.AddrPort) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.listen[ep.Addr()]
	return key, ok
}

// follow lists what list returns and handles every item, then handles
// the watch's events from that list on; again whenever the watch breaks,
// until ctx ends.
func follow[T runtime.Object](ctx context.Context, list func(context.Context) ([]T, string, error),
	watchFrom func(context.Context, string) (watch.Interface, error), handle func(context.Context, T, bool)) {
	for ctx.Err() == nil {
		items, rv, err := list(ctx)
		if err != nil {
			backoff(ctx)
			continue
		}
		for _, it := range items {
			handle(ctx, it, false)
		}
		w, err := watchFrom(ctx, rv)
		if err != nil {
			backoff(ctx)
			continue
		}
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(T); ok {
				handle(ctx, obj, ev.Type == watch.Deleted)
			}
		}
		w.Stop()
	}
}

// backoff waits a little before the API server is asked again.
func backoff(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}

func (k *kubelet) listPods(ctx context.Context) ([]*corev1.Pod, string, error) {
	l, err := k.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", err
	}
	out := make([]*corev1.Pod, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, l.ResourceVersion, nil
}

func (k *kubelet) watchPods(ctx context.Context, rv string) (watch.Interface, error) {
	return k.cs.CoreV1().Pods(k.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
}

func (k *kubelet) listClaims(ctx context.Context) ([]*corev1.PersistentVolumeClaim, string, error) {
	l, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", err
	}
	out := make([]*corev1.PersistentVolumeClaim, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, l.ResourceVersion, nil
}

func (k *kubelet) watchClaims(ctx context.Context, rv string) (watch.Interface, error) {
	return k.cs.CoreV1().PersistentVolumeClaims(k.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
}

func (k *kubelet) pod(ctx context.Context, pod *corev1.Pod, deleted bool) {
	api := k.cs.CoreV1().Pods(k.ns)
	switch {
	case deleted || pod.DeletionTimestamp != nil:
		k.mu.Lock()
		if ip, ok := k.byPod[pod.UID]; ok {
			delete(k.listen, ip)
			delete(k.byPod, pod.UID)
		}
		k.mu.Unlock()
		if !deleted {
			uid := pod.UID
			_ = api.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid}})
		}
	case pod.Spec.NodeName == "":
		_ = api.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: k.ns, UID: pod.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: "fake-node"}}, metav1.CreateOptions{})
	case pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending:
		k.run(ctx, pod)
	}
}

// run starts a bound Pod: once its session claim exists, it gets an
// address and is marked Running and Ready.
func (k *kubelet) run(ctx context.Context, pod *corev1.Pod) {
	var claim string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.Name == "session" {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil || pvc.DeletionTimestamp != nil {
		return // a real kubelet waits for the volume too
	}
	k.mu.Lock()
	ip := k.next
	k.next = k.next.Next()
	k.listen[ip] = string(pvc.UID)
	k.byPod[pod.UID] = ip
	k.mu.Unlock()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != pod.UID || p.DeletionTimestamp != nil {
			return nil
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = ip.String()
		p.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
		p.Status.StartTime = &now
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		_, err = k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil && ctx.Err() == nil {
		fmt.Printf("fake kubelet: run %s: %v\n", pod.Name, err)
	}
}

func (k *kubelet) claim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, deleted bool) {
	api := k.cs.CoreV1().PersistentVolumeClaims(k.ns)
	switch {
	case deleted:
	case pvc.DeletionTimestamp != nil && len(pvc.Finalizers) > 0:
		_, _ = api.Patch(ctx, pvc.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	case pvc.DeletionTimestamp == nil && pvc.Status.Phase != corev1.ClaimBound:
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c, err := api.Get(ctx, pvc.Name, metav1.GetOptions{})
			if err != nil || c.UID != pvc.UID || c.Status.Phase == corev1.ClaimBound {
				return err
			}
			c.Status.Phase = corev1.ClaimBound
			_, err = api.UpdateStatus(ctx, c, metav1.UpdateOptions{})
			return err
		})
	}
}
