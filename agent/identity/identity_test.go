package identity_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/affido/affido/agent/identity"
	"github.com/affido/affido/agent/privsep"
)

func load(t *testing.T, dir string) *identity.Store {
	t.Helper()
	s, err := identity.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestClaimAndReload(t *testing.T) {
	dir := t.TempDir()
	s := load(t, dir)
	if _, _, ok := s.Current(); ok {
		t.Fatal("a fresh sandbox is claimed")
	}
	if _, err := os.Stat(filepath.Join(dir, identity.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load wrote a file: %v", err)
	}
	if err := s.Claim("alice", "tok-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Claim("alice", "tok-2"); err != nil { // the manager rotates the token
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, identity.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("identity file mode %v, want 0600", info.Mode().Perm())
	}
	user, token, ok := load(t, dir).Current() // a restart
	if !ok || user != "alice" || token != "tok-2" {
		t.Fatalf("after reload: %q %q %v", user, token, ok)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// A claim IfUnclaimed (the manager's claim from the warm pool) binds a
// fresh sandbox and may be sent again, but never replaces the token of a
// sandbox that is the user's already: another manager's bind set it, and
// the registry holds that one.
func TestClaimIfUnclaimedNeverReplacesAToken(t *testing.T) {
	dir := t.TempDir()
	s := load(t, dir)
	if err := s.ClaimIfUnclaimed("alice", "tok-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimIfUnclaimed("alice", "tok-1"); err != nil { // the same call again
		t.Fatalf("the same claim again: %v", err)
	}
	if err := s.ClaimIfUnclaimed("alice", "tok-2"); !errors.Is(err, identity.ErrClaimedAlready) {
		t.Fatalf("another token IfUnclaimed: %v, want ErrClaimedAlready", err)
	}
	if err := s.ClaimIfUnclaimed("bob", "tok-3"); !errors.Is(err, identity.ErrClaimedByOther) {
		t.Fatalf("another user: %v, want ErrClaimedByOther", err)
	}
	if user, token, _ := load(t, dir).Current(); user != "alice" || token != "tok-1" {
		t.Fatalf("on disk after the refused claims: %q %q, want alice tok-1", user, token)
	}
	if err := s.Claim("alice", "tok-2"); err != nil { // a plain claim still rotates
		t.Fatal(err)
	}
	if _, token, _ := s.Current(); token != "tok-2" {
		t.Fatalf("token after a plain claim: %q", token)
	}
}

func TestAnotherUserIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := load(t, dir)
	if err := s.Claim("alice", "tok-a"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, identity.FileName)
	before, _ := os.ReadFile(path)
	for _, st := range []*identity.Store{s, load(t, dir)} { // the same process, and after a restart
		if err := st.Claim("mallory", "tok-m"); !errors.Is(err, identity.ErrClaimedByOther) {
			t.Fatalf("claim by another user: %v, want ErrClaimedByOther", err)
		}
		if user, token, _ := st.Current(); user != "alice" || token != "tok-a" {
			t.Fatalf("identity changed to %q %q", user, token)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatalf("identity file changed: %s -> %s", before, after)
	}
}

func TestBadClaimsWriteNothing(t *testing.T) {
	cases := map[string][2]string{
		"empty user":       {"", "tok"},
		"long user":        {strings.Repeat("a", 65), "tok"},
		"user with a dot":  {"a.b", "tok"},
		"user with slash":  {"../bob", "tok"},
		"empty token":      {"alice", ""},
		"long token":       {"alice", strings.Repeat("t", identity.MaxToken+1)},
		"token with space": {"alice", "tok en"},
		"token with CRLF":  {"alice", "tok\r\nX-Evil: 1"},
		"token non-ASCII":  {"alice", "tök"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := load(t, dir)
			if err := s.Claim(c[0], c[1]); !errors.Is(err, identity.ErrInvalid) {
				t.Fatalf("Claim(%q, %q) = %v, want ErrInvalid", c[0], c[1], err)
			}
			if _, _, ok := s.Current(); ok {
				t.Fatal("claimed")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("wrote %v", entries)
			}
		})
	}
	s := load(t, t.TempDir())
	if err := s.Claim(strings.Repeat("a", 64), strings.Repeat("t", identity.MaxToken)); err != nil {
		t.Fatalf("longest valid claim: %v", err)
	}
}

func TestConcurrentClaimsOneWins(t *testing.T) {
	dir := t.TempDir()
	s := load(t, dir)
	users := []string{"alice", "bob", "carol", "dave"}
	errs := make([]error, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Go(func() { errs[i] = s.Claim(u, "tok-"+u) })
	}
	wg.Wait()
	won := ""
	for i, err := range errs {
		switch {
		case err == nil && won == "":
			won = users[i]
		case err == nil:
			t.Fatalf("both %s and %s claimed the sandbox", won, users[i])
		case !errors.Is(err, identity.ErrClaimedByOther):
			t.Fatalf("%s: %v", users[i], err)
		}
	}
	if user, token, _ := load(t, dir).Current(); user != won || token != "tok-"+won {
		t.Fatalf("on disk %q %q, winner %q", user, token, won)
	}
}

func TestUnreadableIdentityIsAnError(t *testing.T) {
	for name, content := range map[string]string{"not JSON": "{", "no user": `{"user":"","token":"t"}`, "bad user": `{"user":"a/b","token":"t"}`} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, identity.FileName), []byte(content), 0o600)
			if _, err := identity.Load(dir); err == nil {
				t.Fatal("a damaged identity loaded as an unclaimed sandbox")
			}
		})
	}
}

// The tools run as privsep.ToolsUID; the agent keeps identity.json in its
// data directory, closed to them (0700, as privsep leaves it), and the file
// itself is 0600, so even an open directory would not give the token away.
func TestToolsCannotReadTheIdentity(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to run a command as the tools' uid")
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755) // t.TempDir's own parent is closed to everyone
	for _, dirMode := range []os.FileMode{0o700, 0o755} {
		data := filepath.Join(base, fmt.Sprintf("data-%o", dirMode))
		os.Mkdir(data, dirMode)
		os.Chmod(data, dirMode)
		s := load(t, data)
		if err := s.Claim("alice", "tok-alice-secret"); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(data, identity.FileName)
		// Owned by the agent, as when the agent wrote them.
		os.Chown(data, privsep.AgentUID, privsep.AgentUID)
		os.Chown(path, privsep.AgentUID, privsep.AgentUID)
		cmd := exec.Command("cat", path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: privsep.ToolsUID, Gid: privsep.ToolsUID, Groups: []uint32{privsep.WorkGID}}}
		out, err := cmd.CombinedOutput()
		if err == nil || strings.Contains(string(out), "tok-alice-secret") {
			t.Fatalf("data dir %o: the tools' uid read the identity: %v %q", dirMode, err, out)
		}
	}
}
