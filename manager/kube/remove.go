package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/affido/affido/manager/lifecycle"
)

// RemoveContainer deletes the sandbox's Pod and NetworkPolicy; its claims
// stay, and a later start makes both on them again.
func (e *Engine) RemoveContainer(ctx context.Context, n lifecycle.Names) error {
	if err := e.Stop(ctx, n.Sandbox); err != nil {
		return err
	}
	err := e.cs.NetworkingV1().NetworkPolicies(e.cfg.Namespace).Delete(ctx, policyName(n), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete network policy %s: %w", policyName(n), err)
	}
	return nil
}

// RemoveAll deletes the Pod, the NetworkPolicy and both claims (a reset),
// and waits until the claims are gone, so a sandbox made again under the
// same names starts empty.
func (e *Engine) RemoveAll(ctx context.Context, n lifecycle.Names) error {
	if err := e.RemoveContainer(ctx, n); err != nil {
		return err
	}
	api := e.cs.CoreV1().PersistentVolumeClaims(e.cfg.Namespace)
	for _, name := range []string{sessionClaim(n), workspaceClaim(n)} {
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete claim %s: %w", name, err)
		}
		if err := e.claimGone(ctx, name); err != nil {
			return err
		}
	}
	return nil
}
