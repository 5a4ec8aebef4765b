//go:build e2e

package e2e

import (
	"bytes"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// adminBackup runs `affido admin backup USER -o -` in the manager
// container and returns the archive.
func adminBackup(t *testing.T, user string) []byte {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command("docker", "exec", managerName(), "/bin/affido", "admin", "backup", user, "-o", "-")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("admin backup %s: %v\n%s", user, err, errb.String())
	}
	return out.Bytes()
}

// adminRestore runs `affido admin restore USER -` with archive on its
// standard input.
func adminRestore(user string, archive []byte) (string, error) {
	cmd := exec.Command("docker", "exec", "-i", managerName(), "/bin/affido", "admin", "restore", user, "-")
	cmd.Stdin = bytes.NewReader(archive)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A user is backed up while their agent runs, their sandbox and volumes
// are removed, and a restore brings back the conversation, the rule, the
// workspace file and the reminder, which still fires on time. A tampered
// archive is refused first and changes nothing.
func TestBackupRemoveRestore(t *testing.T) {
	startSink(t)
	user, tok := reminderUser(t, "backup", "/restored")
	due := setReminder(t, user, tok, 120*time.Second, "after restore "+user)
	prompt(t, user, tok, map[string]any{"text": "a line the restore must keep"})
	req, _ := http.NewRequest("PUT", baseURL+"/u/"+user+"/uploads/kept.txt", strings.NewReader("the workspace's bytes"))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("upload: %v %v", resp, err)
	}
	resp.Body.Close()

	archive := adminBackup(t, user)
	if len(archive) < 1024 || !bytes.Contains(archive, []byte("MANIFEST.json")) {
		t.Fatalf("the archive (%d bytes) has no manifest", len(archive))
	}

	admin(t, "reset", user)
	if c, n, v := objects(t, user); c+n+v != 0 {
		t.Fatalf("after the reset %d containers, %d networks, %d volumes remain", c, n, v)
	}

	tampered := bytes.Clone(archive)
	i := bytes.Index(tampered, []byte("the workspace's bytes"))
	if i < 0 {
		t.Fatal("the workspace file is not in the archive")
	}
	tampered[i] ^= 1
	if out, err := adminRestore(user, tampered); err == nil || !strings.Contains(out, "SHA-256") {
		t.Fatalf("a tampered archive was not refused: %v %s", err, out)
	}
	// The refused archive wrote nothing: the sandbox still takes a restore
	// without --force (it refuses one over data).
	if out, err := adminRestore(user, archive); err != nil || !strings.Contains(out, "next_wake_at") {
		t.Fatalf("restore: %v %s", err, out)
	}
	if out, err := adminRestore(user, archive); err == nil || !strings.Contains(out, "409") {
		t.Fatalf("a second restore over the data: %v %s", err, out)
	}

	if r := mustGet(t, user, tok, "/inspect"); !strings.Contains(r.Body, "a line the restore must keep") {
		t.Errorf("the restored conversation lost its entries: %.500s", r.Body)
	}
	if r := mustGet(t, user, tok, "/rules"); !strings.Contains(r.Body, "set_reminder") {
		t.Errorf("the restored rules: %s", r.Body)
	}
	if r := mustGet(t, user, tok, "/uploads/kept.txt"); r.Body != "the workspace's bytes" {
		t.Errorf("the restored workspace file: %q", r.Body)
	}
	if time.Now().After(due) {
		t.Fatalf("the backup, reset and restore took past the reminder's time (%v)", due)
	}
	checkDelivered(t, "/restored", "after restore", due, 20*time.Second)
	waitNotificationsSettled(t, user, "delivered 1")
}
