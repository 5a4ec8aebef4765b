package privsep_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/agent/privsep"
	"github.com/affido/affido/agent/runner"
	"github.com/affido/affido/agent/skills"
	"github.com/affido/affido/agent/workspace"
	"github.com/affido/affido/marketplace"
)

// The test binary plays the whole sandbox: the helper process (as root)
// calls privsep.Start, which runs this binary again as the tool runner
// ("runner", under the tools' uid, with "tool-exec" as its trampoline) and
// drops the helper to the agent's uid.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "runner":
			conn, err := runner.AgentConn()
			if err != nil {
				os.Exit(2)
			}
			ws, _ := os.Getwd()
			err = runner.Serve(conn, runner.Config{Shell: "/bin/sh", Dir: ws, Env: []string{"PATH=/bin:/usr/bin"},
				OutputCap: 16 << 10, Limits: runner.Limits{CPUSeconds: 10, FileSize: 1 << 20}, Trampoline: []string{os.Args[0], "tool-exec"}})
			if err != nil {
				os.Exit(3)
			}
			os.Exit(0)
		case "tool-exec":
			err := runner.ExecLimited(os.Args[2:])
			os.Stderr.WriteString(err.Error())
			os.Exit(126)
		}
	}
	if os.Getenv("AFFIDO_PRIVSEP_TEST_ROLE") == "agent" {
		agentHelper()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// dirFetcher serves a built marketplace directory.
type dirFetcher string

func (d dirFetcher) Fetch(_ context.Context, p string, limit int64) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(string(d), p))
	if err != nil {
		return nil, skills.ErrUnknown
	}
	return b, nil
}

// outcome is what the agent's side saw of one owner operation.
type outcome struct {
	Err  string `json:"err,omitempty"`
	Body string `json:"body,omitempty"`
}

func result(body string, err error) outcome {
	if err != nil {
		return outcome{Err: err.Error()}
	}
	return outcome{Body: body}
}

// agentHelper runs in the helper process: it starts the sandbox's two
// identities, lets the model's shell hide what it wrote, then tries the
// owner's operations as the agent, and prints what each gave.
func agentHelper() {
	ws, data, market := os.Getenv("AFFIDO_TEST_WS"), os.Getenv("AFFIDO_TEST_DATA"), os.Getenv("AFFIDO_TEST_MARKET")
	fail := func(err error) {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	shell, _, err := privsep.Start(privsep.Config{Self: os.Args[0], Workspace: ws, Data: data})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	in := &skills.Installer{Workspace: ws, Records: filepath.Join(data, "skills"), Market: dirFetcher(market)}
	if _, err := in.Install(ctx, "csv-summary", ""); err != nil {
		fail(err)
	}
	// The model's shell, under the tools' uid.
	out, code, err := shell.Run(ctx, `mkdir secret && echo x > secret/f && chmod 000 secret/f secret &&
echo y > hidden && chmod 000 hidden &&
mkdir open && echo z > open/g && chmod 755 open &&
mkdir sticky && echo s > sticky/s && chmod 1770 sticky &&
ln -s ../outside link && ln -s ../outside/o linkfile &&
mv skills/csv-summary skills/moved && mkdir skills/csv-summary && echo extra > skills/csv-summary/extra && chmod 000 skills/csv-summary/extra skills/csv-summary`, 10*time.Second)
	if err != nil || code != 0 {
		fail(fmt.Errorf("the tools' shell: %d %q %v", code, out, err))
	}
	got := map[string]outcome{}
	// Without a repairer, as before: the agent's uid is shut out.
	_, err = workspace.Workspace{Dir: ws}.List("secret")
	got["list secret without repair"] = result("", err)
	w := workspace.Workspace{Dir: ws, Repair: shell}
	in.Repair = shell
	list := func(p string) outcome {
		l, err := w.List(p)
		var names []string
		for _, f := range l {
			names = append(names, f.Name)
		}
		return result(strings.Join(names, ","), err)
	}
	read := func(p string) outcome {
		b, _, err := w.Read(p, 1<<20)
		return result(string(b), err)
	}
	got["list secret"] = list("secret")
	got["read secret/f"] = read("secret/f")
	got["read hidden"] = read("hidden")
	_, err = w.Write("secret/new", strings.NewReader("new"), 1<<20)
	got["write secret/new"] = result("", err)
	_, err = w.Write("open/g", strings.NewReader("new"), 1<<20)
	got["write open/g"] = result("", err)
	got["delete open"] = result("", w.Delete("open"))
	got["delete secret"] = result("", w.Delete("secret"))
	got["delete hidden"] = result("", w.Delete("hidden"))
	got["delete sticky"] = result("", w.Delete("sticky"))
	// Links that leave the workspace are neither followed nor repaired.
	got["list link"] = list("link")
	got["read linkfile"] = read("linkfile")
	got["repair link"] = result("", shell.Repair(ctx, "link"))
	got["repair link/o"] = result("", shell.Repair(ctx, "link/o"))
	got["repair linkfile"] = result("", shell.Repair(ctx, "linkfile"))
	got["repair .."] = result("", shell.Repair(ctx, "../outside"))
	s, err := in.Install(ctx, "csv-summary", "")
	got["reinstall csv-summary"] = result(fmt.Sprint(s.OK), err)
	if err := json.NewEncoder(os.Stdout).Encode(got); err != nil {
		fail(err)
	}
}

// The model's shell hides a directory, a file and a skill's directory with
// chmod 000 (and files in directories the agent may not write, as the
// tools' umask makes them); the owner, through the agent, still lists,
// reads, overwrites and deletes them, and reinstalls the skill. Run with
// the real uids: root starts the helper, which becomes the agent.
func TestOwnerReachesWhatTheToolsClosed(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to start the sandbox's two identities")
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755) // t.TempDir's own parent is closed to everyone
	os.Chmod(base, 0o755)
	ws, data, market := filepath.Join(base, "workspace"), filepath.Join(base, "data"), filepath.Join(base, "market")
	for _, d := range []string{ws, data} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := privsep.Own(data, ws); err != nil {
		t.Fatal(err)
	}
	if _, err := marketplace.Build("../../marketplace/skills", market); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(market, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) })
	// The test binary sits in a directory only root may enter: copy it out.
	self := filepath.Join(base, "agent")
	if err := copyFile(os.Args[0], self); err != nil {
		t.Fatal(err)
	}
	// Outside the workspace, something the tools' uid owns and closed.
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o700)
	os.WriteFile(filepath.Join(outside, "o"), []byte("o"), 0o600)
	for _, p := range []string{outside, filepath.Join(outside, "o")} {
		os.Chown(p, privsep.ToolsUID, privsep.ToolsUID)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = []string{"AFFIDO_PRIVSEP_TEST_ROLE=agent", "AFFIDO_TEST_WS=" + ws, "AFFIDO_TEST_DATA=" + data, "AFFIDO_TEST_MARKET=" + market}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the helper: %v %s", err, out)
	}
	var got map[string]outcome
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]string{
		"list secret":           "f",
		"read secret/f":         "x\n",
		"read hidden":           "y\n",
		"write secret/new":      "",
		"write open/g":          "",
		"delete open":           "",
		"delete secret":         "",
		"delete hidden":         "",
		"delete sticky":         "",
		"repair link":           "",
		"repair link/o":         "",
		"repair linkfile":       "",
		"reinstall csv-summary": "true",
	}
	if g := got["list secret without repair"]; !strings.Contains(g.Err, "permission denied") {
		t.Errorf("the tools did not shut the agent out of secret (%+v): the test tries nothing", g)
	}
	for op, body := range want {
		if g := got[op]; g.Err != "" || g.Body != body {
			t.Errorf("%s: %q, error %q; want %q", op, g.Body, g.Err, body)
		}
	}
	for op, want := range map[string]string{"list link": "outside the workspace", "read linkfile": "outside the workspace", "repair ..": "not a path inside"} {
		if g := got[op]; !strings.Contains(g.Err, want) {
			t.Errorf("%s: %+v, want an error saying %q", op, g, want)
		}
	}
	for p, mode := range map[string]os.FileMode{outside: fs.ModeDir | 0o700, filepath.Join(outside, "o"): 0o600} {
		if st, err := os.Stat(p); err != nil || st.Mode() != mode {
			t.Errorf("outside the workspace, %s became %v (%v)", filepath.Base(p), st.Mode(), err)
		}
	}
	for _, gone := range []string{"secret", "hidden", "open", "sticky"} {
		if _, err := os.Lstat(filepath.Join(ws, gone)); err == nil {
			t.Errorf("%s is still there", gone)
		}
	}
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
