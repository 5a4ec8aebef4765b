package browserbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/affido/affido/internal/atomicfile"
	"github.com/affido/affido/internal/browserapi"
)

// receiveFile writes one file the manager sends (browser_upload, after the
// owner allowed it) into UploadDir, and answers "ok" or the error.
func receiveFile(st net.Conn) error {
	defer st.Close()
	r := bufio.NewReader(st)
	name, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	name = strings.TrimSuffix(name, "\n")
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || strings.ContainsAny(name, "\r\x00") {
		fmt.Fprintf(st, "bad name %q\n", name)
		return fmt.Errorf("bad name %q", name)
	}
	// One file at a time: the last upload's is gone before the next comes,
	// so a page cannot be handed an earlier one later.
	if old, _ := os.ReadDir(browserapi.UploadDir); len(old) > 0 {
		for _, e := range old {
			os.Remove(filepath.Join(browserapi.UploadDir, e.Name()))
		}
	}
	path := filepath.Join(browserapi.UploadDir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintf(st, "%v\n", err)
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, browserapi.MaxUpload+1))
	if err == nil && n > browserapi.MaxUpload {
		err = errors.New("file too large")
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		fmt.Fprintf(st, "%v\n", err)
		return err
	}
	_, err = io.WriteString(st, "ok\n")
	return err
}

// downloadID is Chromium's name for a download's file (a GUID).
var downloadID = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// sendDownload answers the manager's read of one finished download (the
// owner allowed the agent to save it): "ok <size>" and its bytes.
func sendDownload(st net.Conn) error {
	defer st.Close()
	id, err := bufio.NewReader(io.LimitReader(st, 100)).ReadString('\n')
	if err != nil {
		return err
	}
	id = strings.TrimSuffix(id, "\n")
	if !downloadID.MatchString(id) {
		fmt.Fprintf(st, "bad download id %q\n", id)
		return fmt.Errorf("bad download id %q", id)
	}
	f, err := os.OpenFile(filepath.Join(browserapi.DownloadDir, id), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		fmt.Fprintf(st, "no such download\n")
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > browserapi.MaxDownload {
		fmt.Fprintf(st, "the download is not a file of at most %d bytes\n", browserapi.MaxDownload)
		return fmt.Errorf("download %s: not a file of at most %d bytes", id, browserapi.MaxDownload)
	}
	if _, err := fmt.Fprintf(st, "ok %d\n", fi.Size()); err != nil {
		return err
	}
	_, err = io.Copy(st, io.LimitReader(f, fi.Size()))
	return err
}

// Bridge joins standard input and output to the main process's socket:
// the process the manager starts with exec for each session.
func Bridge(in io.Reader, out io.Writer) error {
	c, err := net.Dial("unix", browserapi.BridgeSocket)
	if err != nil {
		return err
	}
	defer c.Close()
	done := make(chan error, 2)
	go func() { _, err := io.Copy(c, in); done <- err }()
	go func() { _, err := io.Copy(out, c); done <- err }()
	return <-done
}

// saveCookies replaces the cookie file with what the stream carries,
// synced before it answers "ok".
func saveCookies(st net.Conn) error {
	defer st.Close()
	b, err := io.ReadAll(io.LimitReader(st, browserapi.MaxCookies+1))
	if err == nil && len(b) > browserapi.MaxCookies {
		err = errors.New("cookies too large")
	}
	if err == nil {
		err = atomicfile.Write(browserapi.CookieFile, b, 0o600)
	}
	if err != nil {
		fmt.Fprintf(st, "%v\n", err)
		return err
	}
	_, err = io.WriteString(st, "ok\n")
	return err
}
