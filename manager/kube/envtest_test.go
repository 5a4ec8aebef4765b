package kube_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The Kubernetes tests run a real kube-apiserver and etcd (envtest) readied
// by scripts/k8s-assets.sh. Without them the tests skip, unless
// AFFIDO_REQUIRE_K8S=1 (./verify.sh's Kubernetes step sets it), which makes
// that a failure. AFFIDO_SKIP_K8S=1 (verify.sh's unit step) skips them:
// they run in their own step once the binaries are built.

var (
	envOnce sync.Once
	env     *envtest.Environment
	envCfg  *rest.Config
	envErr  error
)

// assetsDir is where scripts/k8s-assets.sh keeps the binaries.
func assetsDir() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	out, err := exec.Command("bash", "../../scripts/k8s-assets.sh", "dir").Output()
	if err != nil {
		return "", fmt.Errorf("scripts/k8s-assets.sh dir: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// apiServer returns a client of the test API server, started once for
// the package, or skips the test when its binaries are not built.
func apiServer(t *testing.T) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	if os.Getenv("AFFIDO_SKIP_K8S") == "1" {
		t.Skip("AFFIDO_SKIP_K8S=1: the Kubernetes tests run in their own step of ./verify.sh")
	}
	envOnce.Do(func() {
		dir, err := assetsDir()
		if err != nil {
			envErr = err
			return
		}
		for _, bin := range []string{"etcd", "kube-apiserver"} {
			if st, err := os.Stat(filepath.Join(dir, bin)); err != nil || st.Mode()&0o111 == 0 {
				envErr = fmt.Errorf("%w: %s has no %s (build it with scripts/k8s-assets.sh build)", errNoAssets, dir, bin)
				return
			}
		}
		start := time.Now()
		env = &envtest.Environment{BinaryAssetsDirectory: dir}
		envCfg, envErr = env.Start()
		if envErr == nil {
			fmt.Fprintf(os.Stderr, "envtest: kube-apiserver and etcd up in %s\n", time.Since(start).Round(time.Millisecond))
		}
	})
	if envErr != nil {
		if os.Getenv("AFFIDO_REQUIRE_K8S") != "1" && strings.Contains(envErr.Error(), errNoAssets.Error()) {
			t.Skipf("skipping the Kubernetes tests: %v", envErr)
		}
		t.Fatalf("test API server: %v", envErr)
	}
	return envCfg, kubernetes.NewForConfigOrDie(envCfg)
}

var errNoAssets = fmt.Errorf("the test API server's binaries are not built")

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "envtest stop: %v\n", err)
		}
	}
	os.Exit(code)
}

// namespace makes a fresh namespace with Pod Security enforced at level
// (the real admission plugin judges every Pod).
func namespace(t *testing.T, cs kubernetes.Interface, level string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "affido-test-",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}
	got, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return got.Name
}
