package kube

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/affido/affido/manager/lifecycle"
)

// A NetworkPolicy that drifted is brought back to the wanted spec by a
// read-modify-write; when another writer got in between (a resourceVersion
// conflict) it reads again and retries, rather than overwriting blindly.
func TestEnsurePolicyRetriesOnConflict(t *testing.T) {
	c := testConfig()
	n := lifecycle.Names{Stack: c.Stack, Sandbox: "alice"}
	drifted := c.Policy(n)
	drifted.Spec.Egress = nil // someone loosened it
	cs := fake.NewClientset(drifted)
	conflicts := 0
	cs.PrependReactor("update", "networkpolicies", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "networking.k8s.io", Resource: "networkpolicies"}, drifted.Name, nil)
		}
		return false, nil, nil
	})
	e, err := New(cs, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ensurePolicy(context.Background(), n); err != nil {
		t.Fatalf("ensure policy: %v", err)
	}
	got, err := cs.NetworkingV1().NetworkPolicies(c.Namespace).Get(context.Background(), drifted.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if conflicts != 1 || len(got.Spec.Egress) != 1 {
		t.Fatalf("after %d conflicts the policy's egress is %+v, want the gateway rule", conflicts, got.Spec.Egress)
	}
	verbs := map[string]int{}
	for _, a := range cs.Actions() {
		verbs[a.GetVerb()]++
	}
	// create (exists), then get+update (conflict), get+update; our own get above
	if verbs["update"] != 2 || verbs["get"] != 3 {
		t.Fatalf("calls %v: want two reads each followed by an update", verbs)
	}
}
