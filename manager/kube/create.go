package kube

import (
	"context"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/affido/affido/manager/lifecycle"
)

// Create makes the sandbox's place: its NetworkPolicy, so that no Pod of
// it ever runs unisolated. The Pod comes with Start. subnet is ignored:
// the cluster gives the Pod its address.
func (e *Engine) Create(ctx context.Context, n lifecycle.Names, _ netip.Prefix) (lifecycle.Container, error) {
	if err := e.ensurePolicy(ctx, n); err != nil {
		return lifecycle.Container{}, err
	}
	return e.Inspect(ctx, n)
}

// ensurePolicy creates the NetworkPolicy, or brings an existing one to the
// wanted spec: read, change, write, again on a resourceVersion conflict
// (another manager wrote meanwhile), never a blind overwrite.
func (e *Engine) ensurePolicy(ctx context.Context, n lifecycle.Names) error {
	want := e.cfg.Policy(n)
	api := e.cs.NetworkingV1().NetworkPolicies(e.cfg.Namespace)
	_, err := api.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create network policy %s: %w", want.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
			return nil
		}
		up := have.DeepCopy()
		up.Spec = want.Spec
		_, err = api.Update(ctx, up, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update network policy %s: %w", want.Name, err)
	}
	return nil
}

// EnsureVolumes creates the sandbox's two claims. A claim still being
// deleted (a reset just before) is waited out and made anew.
func (e *Engine) EnsureVolumes(ctx context.Context, n lifecycle.Names) error {
	api := e.cs.CoreV1().PersistentVolumeClaims(e.cfg.Namespace)
	for _, want := range e.cfg.Claims(n) {
		for {
			_, err := api.Create(ctx, want, metav1.CreateOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create claim %s: %w", want.Name, err)
			}
			have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("get claim %s: %w", want.Name, err)
			}
			if have.DeletionTimestamp == nil {
				if sandboxOf(have.Annotations) != n.Sandbox {
					return fmt.Errorf("claim %s exists but belongs to %q, not %s", want.Name, sandboxOf(have.Annotations), n.Sandbox)
				}
				break
			}
			if err := e.claimGone(ctx, want.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
