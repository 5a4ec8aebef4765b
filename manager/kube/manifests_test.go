package kube_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// manifests reads every object of deploy/kubernetes.
func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes (%v)", err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(b, []byte("\n---\n")) {
			var m map[string]any
			if err := yaml.Unmarshal(doc, &m); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(m) == 0 {
				continue
			}
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// The control plane's manifests pass the real API server's validation and
// admission (Pod Security of their namespace included) in a server-side
// dry run. Their namespace is made for real: a dry run cannot create into
// a namespace that does not exist.
func TestManifestsDryRun(t *testing.T) {
	cfg, cs := apiServer(t)
	ctx := context.Background()
	objs := manifests(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for _, want := range []string{"Namespace", "Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "NetworkPolicy"} {
		if kinds[want] == 0 {
			t.Errorf("the manifests have no %s", want)
		}
	}
	apply(t, cfg, pick(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Namespace" }), false)
	apply(t, cfg, pick(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() != "Namespace" }), true)
	// A dry run stores nothing.
	if deps, err := cs.AppsV1().Deployments("affido").List(ctx, metav1.ListOptions{}); err != nil || len(deps.Items) != 0 {
		t.Fatalf("after a dry run: %d deployments, %v", len(deps.Items), err)
	}
	if d := replicas(objs, "affido-manager"); d != 2 {
		t.Errorf("the manager Deployment has %d replicas, want 2", d)
	}
}

// apply creates objs on the API server (dryRun: validated and admitted,
// not stored); an object that exists already is left as it is.
func apply(t *testing.T, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := o.GetNamespace(); ns != "" {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		opts := metav1.CreateOptions{FieldValidation: "Strict"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = ri.Create(context.Background(), o, opts)
		// A cluster-scoped object another test of this API server made
		// was validated and admitted then.
		if apierrors.IsAlreadyExists(err) && (!dryRun || o.GetNamespace() == "") {
			continue
		}
		if err != nil {
			t.Errorf("%s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
}

func pick(objs []*unstructured.Unstructured, keep func(*unstructured.Unstructured) bool) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out
}

func replicas(objs []*unstructured.Unstructured, name string) int64 {
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == name {
			n, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
			switch v := n.(type) {
			case int64:
				return v
			case float64:
				return int64(v)
			}
		}
	}
	return 0
}

// Caddy sends the caller key and the manager hands agents its hash: both
// come from the one Secret the operator makes, so they cannot drift, and
// Caddy can run more than one Pod (agents check the key, not an address).
func TestManifestsShareTheCallerKey(t *testing.T) {
	objs := manifests(t)
	secret := func(deployment, env string) (name, key string) {
		for _, o := range objs {
			if o.GetKind() != "Deployment" || o.GetName() != deployment {
				continue
			}
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range cs {
				vars, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
				for _, v := range vars {
					v := v.(map[string]any)
					if v["name"] != env {
						continue
					}
					name, _, _ := unstructured.NestedString(v, "valueFrom", "secretKeyRef", "name")
					key, _, _ := unstructured.NestedString(v, "valueFrom", "secretKeyRef", "key")
					return name, key
				}
			}
		}
		return "", ""
	}
	if name, key := secret("affido-caddy", "AFFIDO_CALLER_KEY"); name != "affido-caller" || key != "key" {
		t.Errorf("Caddy's AFFIDO_CALLER_KEY comes from secret %q key %q, want affido-caller key", name, key)
	}
	if name, key := secret("affido-manager", "AFFIDO_KUBE_CALLER_KEY_SHA256"); name != "affido-caller" || key != "sha256" {
		t.Errorf("the manager's AFFIDO_KUBE_CALLER_KEY_SHA256 comes from secret %q key %q, want affido-caller sha256", name, key)
	}
	for _, d := range []string{"affido-caddy", "affido-manager"} {
		if name, key := secret(d, "AFFIDO_CONTROL_KEY"); name != "affido-control" || key != "key" {
			t.Errorf("%s's AFFIDO_CONTROL_KEY comes from secret %q key %q, want affido-control key", d, name, key)
		}
	}
	if n := replicas(objs, "affido-caddy"); n < 2 {
		t.Errorf("the Caddy Deployment has %d replicas, want 2 or more", n)
	}
}

// The manager's settings name the namespaces the manifests put things in:
// itself, Caddy and the gateway Service in the control namespace; the
// default deny and the Role that makes Pods in the sandbox namespace,
// which the control plane's policies name as the sandboxes'.
func TestManifestsAgreeOnTheNamespaces(t *testing.T) {
	objs := manifests(t)
	var settings map[string]any
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == "affido-config" {
			settings, _, _ = unstructured.NestedMap(o.Object, "data")
		}
	}
	control, _ := settings["AFFIDO_KUBE_NAMESPACE"].(string)
	sandboxes, _ := settings["AFFIDO_KUBE_SANDBOX_NAMESPACE"].(string)
	if control == "" || sandboxes == "" || control == sandboxes {
		t.Fatalf("affido-config names the namespaces %q and %q, want two", control, sandboxes)
	}
	where := map[string]bool{}
	for _, o := range objs {
		where[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = true
	}
	for _, want := range []string{
		"Namespace//" + control, "Namespace//" + sandboxes,
		"Deployment/" + control + "/affido-manager", "Deployment/" + control + "/affido-caddy",
		"Service/" + control + "/affido-gateway", "ServiceAccount/" + control + "/affido-manager",
		"Role/" + control + "/affido-manager", "Role/" + sandboxes + "/affido-manager",
		"NetworkPolicy/" + sandboxes + "/default-deny",
	} {
		if !where[want] {
			t.Errorf("the manifests have no %s", want)
		}
	}
	for _, o := range objs {
		if o.GetKind() == "NetworkPolicy" && o.GetName() == "affido-caddy" {
			from, _, _ := unstructured.NestedSlice(o.Object, "spec", "ingress")
			b, _ := yaml.Marshal(from)
			if !bytes.Contains(b, []byte("kubernetes.io/metadata.name: "+sandboxes+"\n")) {
				t.Errorf("Caddy's policy lets in no sandbox from %s:\n%s", sandboxes, b)
			}
		}
	}
}
