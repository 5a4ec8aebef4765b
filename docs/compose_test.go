package docs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// composeFile is what this test reads of compose.yaml.
type composeFile struct {
	Version  string `json:"version"`
	Services map[string]struct {
		Image           string         `json:"image"`
		Build           any            `json:"build"`
		StopGracePeriod string         `json:"stop_grace_period"`
		Environment     map[string]any `json:"environment"`
	} `json:"services"`
}

// The documented compose path (operations.md, "Compose alone"): after
// ./dev.sh prepare, `docker compose up -d --build` builds every image the
// stack runs from the same context dev.sh builds that tag from, the agent
// image included, and stopping the manager waits longer than its drain.
func TestComposeBuildsWhatDevShBuilds(t *testing.T) {
	raw, err := os.ReadFile("../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("parse compose.yaml: %v", err)
	}
	if c.Version != "2.4" {
		t.Errorf("version %q: docker-compose v1 reads 2.4", c.Version)
	}
	devsh, err := os.ReadFile("../dev.sh")
	if err != nil {
		t.Fatal(err)
	}
	// Each image tag dev.sh builds, and the directory it builds it from.
	built := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+docker_build (\S+) "?([^"\s]+)"?`).FindAllStringSubmatch(string(devsh), -1) {
		built[m[1]] = strings.ReplaceAll(m[2], "$BUILD", ".build")
	}
	for _, tag := range []string{"affido/agent:dev", "affido/manager:dev", "affido/caddy:dev", "affido/postgres:15"} {
		if built[tag] == "" {
			t.Fatalf("dev.sh no longer builds %s with docker_build (the test reads %v)", tag, built)
		}
	}
	images := map[string]bool{}
	for name, svc := range c.Services {
		ctx, _ := svc.Build.(string)
		if ctx == "" {
			t.Errorf("service %s has no build section (a context directory)", name)
			continue
		}
		if want := built[svc.Image]; want != ctx {
			t.Errorf("service %s builds %s from %q; dev.sh builds it from %q", name, svc.Image, ctx, want)
		}
		if strings.HasPrefix(ctx, ".build/") && !strings.Contains(string(devsh), `$BUILD/`+strings.TrimPrefix(ctx, ".build/")) {
			t.Errorf("service %s: dev.sh prepares no %s", name, ctx)
		}
		images[svc.Image] = true
	}
	// Images no service runs (the browser sandboxes', which the manager
	// makes) are built by ./dev.sh prepare itself, or by a function it calls.
	funcs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?ms)^([a-z_]+)\(\) \{\n(.*?)^\}`).FindAllStringSubmatch(string(devsh), -1) {
		funcs[m[1]] = m[2]
	}
	prepare := funcs["cmd_prepare"]
	for name, body := range funcs {
		if regexp.MustCompile(`(?m)^\s+` + name + `$`).MatchString(funcs["cmd_prepare"]) {
			prepare += body
		}
	}
	for tag := range built {
		if !images[tag] && !strings.Contains(prepare, "docker_build "+tag+" ") {
			t.Errorf("dev.sh builds %s, but no compose service does, nor ./dev.sh prepare", tag)
		}
	}

	m := c.Services["sandbox-manager"]
	grace, err := time.ParseDuration(m.StopGracePeriod)
	if err != nil {
		t.Fatalf("sandbox-manager stop_grace_period %q: %v", m.StopGracePeriod, err)
	}
	drain, _ := m.Environment["AFFIDO_DRAIN_TIMEOUT"].(string)
	d, err := time.ParseDuration(strings.TrimSuffix(strings.TrimPrefix(drain, "${AFFIDO_DRAIN_TIMEOUT:-"), "}"))
	if err != nil {
		t.Fatalf("AFFIDO_DRAIN_TIMEOUT %q: %v", drain, err)
	}
	// The drain, the hand-off's second, and the last token-use write (5 s).
	if grace < d+6*time.Second {
		t.Errorf("stop_grace_period %v: want at least the drain %v plus 6 s", grace, d)
	}
}
