// Package deptest checks the fences between Affido's binaries, after
// Tailscale's tstest/deptest: a test lists what a binary (or a tree's
// tests) depends on with `go list -deps` and fails, with the reason and
// the import chain, on a package it must not link.
//
// The binaries declare their fences in cmd/*/deps_test.go; the fences
// between the agent's and the manager's tests are in fences_test.go here.
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// DepChecker checks what one package links.
type DepChecker struct {
	// Pkg is an import path: a binary's main package, or (with Test) a
	// pattern such as "github.com/affido/affido/agent/...".
	Pkg string
	// Test checks the test binaries of the packages Pkg matches instead:
	// what their tests link, test files and test helpers included.
	Test bool
	// Tags are build tags, comma-separated.
	Tags string
	// BadDeps maps a forbidden package to why it is forbidden. A path
	// forbids the package and every package below it.
	BadDeps map[string]string
	// Via names, for a BadDeps key, the only packages that may import it
	// directly: the forbidden package is linked, but through them alone.
	Via map[string][]string
}

// listed is what `go list -json` says of one package.
type listed struct {
	ImportPath string
	Imports    []string
	DepOnly    bool
}

// Check fails t for every forbidden package Pkg links, naming it, the
// reason and one chain of imports that brings it in.
func (c DepChecker) Check(t *testing.T) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list dependencies with: %v", err)
	}
	args := []string{"list", "-deps", "-json=ImportPath,Imports,DepOnly"}
	if c.Test {
		args = append(args, "-test")
	}
	if c.Tags != "" {
		args = append(args, "-tags", c.Tags)
	}
	cmd := exec.Command(goTool, append(args, c.Pkg)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", c.Pkg, err, stderr.Bytes())
	}
	pkgs := map[string]listed{}
	var roots []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list %s: decode: %v", c.Pkg, err)
		}
		pkgs[p.ImportPath] = p
		if !p.DepOnly && (!c.Test || strings.HasSuffix(p.ImportPath, ".test")) {
			roots = append(roots, p.ImportPath)
		}
	}
	if len(roots) == 0 {
		t.Fatalf("go list %s: no package to check", c.Pkg)
	}
	sort.Strings(roots)
	for _, root := range roots {
		for _, chain := range c.violations(pkgs, root) {
			dep := chain[len(chain)-1]
			t.Errorf("%s links %s: %s\n\tvia %s", plain(root), dep, c.BadDeps[c.rule(dep)], strings.Join(chain, " -> "))
		}
	}
}

// violations walks the imports of root breadth first and returns, for
// each import of a forbidden package it reaches (unless by a package Via
// allows), the shortest chain that reaches it.
func (c DepChecker) violations(pkgs map[string]listed, root string) [][]string {
	if c.rule(plain(root)) != "" {
		return [][]string{{plain(root)}}
	}
	from := map[string]string{root: ""}
	chain := func(p string) []string {
		var out []string
		for q := p; q != ""; q = from[q] {
			out = append([]string{plain(q)}, out...)
		}
		return out
	}
	queue := []string{root}
	var found [][]string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[p].Imports {
			if bad := c.rule(plain(imp)); bad != "" {
				// What it imports in turn is its own matter.
				if !slices.Contains(c.Via[bad], plain(p)) {
					found = append(found, append(chain(p), plain(imp)))
				}
				continue
			}
			if _, seen := from[imp]; !seen {
				from[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return found
}

// rule returns the BadDeps key that forbids pkg, or "".
func (c DepChecker) rule(pkg string) string {
	for bad := range c.BadDeps {
		if pkg == bad || strings.HasPrefix(pkg, bad+"/") {
			return bad
		}
	}
	return ""
}

// plain drops the test variant from a listed path: "p [q.test]" is p.
func plain(path string) string {
	path, _, _ = strings.Cut(path, " ")
	return path
}
