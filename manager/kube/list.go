package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/affido/affido/manager/lifecycle"
)

// List returns the stack's objects by sandbox name, read from the API
// server: Pods (and NetworkPolicies without a Pod, as stopped sandboxes)
// as containers, claims as volumes. Kubernetes has no sandbox networks.
func (e *Engine) List(ctx context.Context) (lifecycle.Inventory, error) {
	inv := lifecycle.NewInventory()
	opts := metav1.ListOptions{LabelSelector: e.selector()}
	pods, err := e.cs.CoreV1().Pods(e.cfg.Namespace).List(ctx, opts)
	if err != nil {
		return inv, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		s := sandboxOf(pods.Items[i].Annotations)
		inv.Containers[s] = append(inv.Containers[s], e.container(s, &pods.Items[i]))
	}
	pols, err := e.cs.NetworkingV1().NetworkPolicies(e.cfg.Namespace).List(ctx, opts)
	if err != nil {
		return inv, fmt.Errorf("list network policies: %w", err)
	}
	for _, p := range pols.Items {
		if s := sandboxOf(p.Annotations); len(inv.Containers[s]) == 0 {
			inv.Containers[s] = append(inv.Containers[s], lifecycle.Container{ID: s, Sandbox: s, Status: lifecycle.StatusStopped})
		}
	}
	pvcs, err := e.cs.CoreV1().PersistentVolumeClaims(e.cfg.Namespace).List(ctx, opts)
	if err != nil {
		return inv, fmt.Errorf("list claims: %w", err)
	}
	for _, c := range pvcs.Items {
		s := sandboxOf(c.Annotations)
		inv.Volumes[s] = append(inv.Volumes[s], c.Name)
	}
	return inv, nil
}
