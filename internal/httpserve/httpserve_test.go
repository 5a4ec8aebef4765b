package httpserve_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/internal/httpserve"
)

// A client that sends headers promising a body and then trickles nothing is
// cut off at the body deadline; the handler sees the read fail.
func TestTrickledBodyIsCutOff(t *testing.T) {
	readErr := make(chan error, 1)
	srv := httptest.NewUnstartedServer(httpserve.BodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}), 200*time.Millisecond))
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab")
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the trickled body read without error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was still reading after 30 s")
	}
}

// Once the body is read, a handler that runs past the body deadline keeps
// its context and answers normally.
func TestLongHandlerAfterBodyKeepsItsContext(t *testing.T) {
	srv := httptest.NewServer(httpserve.BodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		deadline := time.Now().Add(400 * time.Millisecond) // twice the body deadline
		for time.Now().Before(deadline) {
			if r.Context().Err() != nil {
				http.Error(w, "context cancelled", 500)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprint(w, "done")
	}), 200*time.Millisecond))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(bufio.NewReader(resp.Body))
	if resp.StatusCode != 200 || string(b) != "done" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}
