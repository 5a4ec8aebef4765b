package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/affido/affido/manager/lifecycle"
)

// Labels and the annotation on every object. A user id may hold capitals
// and underscores, which Kubernetes names and label values refuse, so
// objects carry a key made from the sandbox name (key) in their names and
// labels, and the sandbox name itself in an annotation.
//
// Why labels in one sandbox namespace rather than a namespace per user:
// the manager then needs a Role there (and one to read the gateway Service
// in the control plane's), never the cluster-wide right to create and delete namespaces; NetworkPolicies
// select single Pods by label just as well; and removing a user does not
// wait on the namespace controller's finalizers.
const (
	AnnotationSandbox = "affido.sandbox"
	labelApp          = "app.kubernetes.io/name"
	appAgent          = "affido-agent"
)

// key is sandbox as a Kubernetes name segment and label value: lowercase
// letters, digits and '-', starting and ending with a letter or digit (a
// DNS label, since a Pod's name becomes its hostname).
// A name that is not one already, or is long, is cut and given a hash of
// itself, so two sandboxes never share a key.
func key(sandbox string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(sandbox) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	k := strings.Trim(b.String(), "-")
	if k == sandbox && len(k) <= 40 {
		return k
	}
	sum := sha256.Sum256([]byte(sandbox))
	if len(k) > 40 {
		k = strings.TrimRight(k[:40], "-")
	}
	if k == "" {
		return "s-" + hex.EncodeToString(sum[:4])
	}
	return k + "-" + hex.EncodeToString(sum[:4])
}

func podName(n lifecycle.Names) string    { return n.Stack + "-" + key(n.Sandbox) + "-agent" }
func policyName(n lifecycle.Names) string { return n.Stack + "-" + key(n.Sandbox) }
func sessionClaim(n lifecycle.Names) string {
	return n.Stack + "-" + key(n.Sandbox) + "-session"
}
func workspaceClaim(n lifecycle.Names) string {
	return n.Stack + "-" + key(n.Sandbox) + "-workspace"
}

// labels are every object's labels: the provisioner's, with the key for
// the sandbox.
func labels(n lifecycle.Names) map[string]string {
	l := n.Labels()
	l[lifecycle.LabelSandbox] = key(n.Sandbox)
	if u, ok := l[lifecycle.LabelUser]; ok {
		l[lifecycle.LabelUser] = key(u)
	}
	return l
}

// selector picks the stack's objects.
func (e *Engine) selector() string {
	return lifecycle.LabelManaged + "=true," + lifecycle.LabelStack + "=" + e.cfg.Stack
}

// sandboxOf is the sandbox an object belongs to.
func sandboxOf(annotations map[string]string) string { return annotations[AnnotationSandbox] }
