//go:build e2e

package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The compose path on a fresh clone, as docs/operations.md tells it:
// ./dev.sh prepare, then `docker compose up -d --build` (or docker-compose)
// with nothing else set, and a first request answers 200. Its own stack
// (affidoclone on port 18093, its own subnets) runs beside the test stack.
// It rebuilds the affido/*:dev images from the clone, so e2e-test/run.sh
// runs it alone, after the other suites (AFFIDO_E2E_COMPOSE=1).
func TestComposeUpOnAFreshClone(t *testing.T) {
	if os.Getenv("AFFIDO_E2E_COMPOSE") != "1" {
		t.Skip("e2e-test/run.sh runs this after the other suites (it rebuilds the affido/*:dev images)")
	}
	const cloneStack, port = "affidoclone", "18093"
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "affido")
	if out, err := exec.Command("git", "clone", "--quiet", root, dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	// A shell of the operator's: none of the test stack's settings.
	var clean []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AFFIDO_") && !strings.HasPrefix(kv, "COMPOSE_") {
			clean = append(clean, kv)
		}
	}
	stackEnv := append(clean, "AFFIDO_STACK="+cloneStack, "AFFIDO_PORT="+port,
		"AFFIDO_CONTROL_SUBNET=10.212.3.0/24", "AFFIDO_CADDY_IP=10.212.3.10", "AFFIDO_SANDBOX_POOL=10.216.0.0/16")
	run := func(env []string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		cmd := exec.Command("./dev.sh", "reset", "-y", "--keep-images")
		cmd.Dir, cmd.Env = dir, stackEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("reset the %s stack: %v\n%s", cloneStack, err, out)
		}
	})

	run(stackEnv, "./dev.sh", "prepare")
	if _, err := os.Stat(filepath.Join(dir, ".env")); err != nil {
		t.Fatalf("./dev.sh prepare wrote no .env: %v", err)
	}
	if exec.Command("docker", "compose", "version").Run() == nil {
		run(clean, "docker", "compose", "up", "-d", "--build")
	} else {
		run(clean, "docker-compose", "up", "-d", "--build")
	}

	manager := cloneStack + "-manager"
	waitUntil(t, 90*time.Second, "the compose stack's manager is healthy", func() bool {
		_, err := dockerTry("exec", manager, "/bin/affido", "manager", "healthcheck")
		return err == nil
	})
	base := "http://127.0.0.1:" + port
	waitUntil(t, 30*time.Second, "Caddy answers", func() bool {
		resp, err := client.Get(base + "/app/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	tok := strings.TrimSpace(docker(t, "exec", manager, "/bin/affido", "admin", "token", "alice"))
	req, _ := http.NewRequest("GET", base+"/u/alice/health", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the first request: %v", err)
	}
	body := readAll(resp)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body, `"user":"alice"`) {
		t.Fatalf("the first request: %d %s", resp.StatusCode, body)
	}
}
