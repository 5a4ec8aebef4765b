package agentclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

func TestBackupAndRestoreGoOverTheControlPath(t *testing.T) {
	var got http.Request
	c := proxy(t, 200, "tar bytes", &got, nil)
	body, err := c.Backup(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if string(b) != "tar bytes" || got.Method != "GET" || got.URL.Path != "/_sandbox/"+ep.String()+sandboxapi.BackupPath ||
		got.Header.Get(sandboxapi.HeaderControl) != "1" || got.Header.Get(sandboxapi.HeaderControlKey) != testControlKey {
		t.Fatalf("backup sent %s %s %v, got %q", got.Method, got.URL.Path, got.Header, b)
	}

	c = proxy(t, 200, `{"files":3,"next_wake_at":"2030-01-02T03:04:05Z"}`, &got, nil)
	a, err := c.Restore(context.Background(), ep, strings.NewReader("archive"), true)
	if err != nil || a.Files != 3 || a.NextWakeAt == nil || a.NextWakeAt.Year() != 2030 {
		t.Fatalf("restore: %+v %v", a, err)
	}
	if got.Method != "POST" || got.URL.Path != "/_sandbox/"+ep.String()+sandboxapi.RestorePath || got.URL.Query().Get(sandboxapi.Force) != "1" {
		t.Fatalf("restore sent %s %s", got.Method, got.URL.String())
	}

	// The agent's refusals reach the operator with its words.
	for _, status := range []int{409, 422} {
		c = proxy(t, status, `{"type":"https://affido.dev/problems/bad-archive","detail":"\"workspace/x\" is missing"}`, &got, nil)
		_, err := c.Restore(context.Background(), ep, strings.NewReader("archive"), false)
		var p *problem.Error
		if !errors.As(err, &p) || p.Status != status || !strings.Contains(err.Error(), "is missing") {
			t.Fatalf("%d: %v", status, err)
		}
	}
	c = proxy(t, 503, `{}`, &got, nil)
	if _, err := c.Backup(context.Background(), ep); err == nil {
		t.Fatal("503: no error")
	}
}
