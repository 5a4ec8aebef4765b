// Package browserbox is the main process of a user's browser sandbox (the
// affido-browser binary): it starts Chromium with its debugging pipe and
// its proxy pointed at itself, reaps Chromium's children, and joins both
// to the manager through the bridge (internal/browserapi). It holds no
// secret and decides nothing: every address a page reaches is checked by
// the manager, which is the other end of every proxy connection.
package browserbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/affido/affido/internal/browserapi"
)

// Config is how the sandbox runs Chromium.
type Config struct {
	Chromium string   // the binary (Debian's /usr/lib/chromium/chromium)
	Extra    []string // more flags, for tests
}

// Flags are Chromium's flags in the sandbox. The container is the sandbox
// (no network, no capabilities, read-only root): Docker's seccomp profile
// refuses the namespaces Chromium's own sandbox needs, hence --no-sandbox.
// Every request, loopback included, goes to the proxy.
func Flags() []string {
	return []string{
		"--headless=new", "--no-sandbox", "--remote-debugging-pipe",
		"--user-data-dir=" + browserapi.ProfileDir,
		"--proxy-server=http://" + browserapi.ProxyAddr, "--proxy-bypass-list=<-loopback>",
		"--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
		"--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-breakpad", "--disable-crash-reporter",
		// Nothing of Chromium's own reaches out (update checks, safe
		// browsing, time queries, metrics): only what pages load.
		"--disable-client-side-phishing-detection", "--disable-default-apps", "--disable-domain-reliability",
		"--no-pings", "--safebrowsing-disable-auto-update", "--metrics-recording-only", "--disable-field-trial-config",
		"--no-service-autorun", "--dns-prefetch-disable", "--disable-search-engine-choice-screen", "--disable-gaia-services", "--variations-server-url=data:,",
		"--google-base-url=data:,", "--gcm-checkin-url=data:,", "--gcm-mcs-endpoint=data:,", "--gcm-registration-url=data:,",
		"--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,NetworkTimeServiceQuerying,CertificateTransparencyComponentUpdater,SafeBrowsing,InterestFeedContentSuggestions,PushMessaging,DnsOverHttps,HttpsUpgrades,MediaDrmPreprovisioning,AutofillEnableAccountWalletStorage,PreconnectToSearch,NetworkPrediction",
		"--password-store=basic", "--mute-audio", "--hide-scrollbars", "--window-size=1280,900",
		"about:blank",
	}
}

// box is the running sandbox: Chromium's pipe and the current bridge.
type box struct {
	toChrome *os.File // Chromium's fd 3
	writeMu  sync.Mutex

	mu      sync.Mutex
	session *yamux.Session
	cdp     net.Conn // the current CDP stream, if any
}

// Run starts Chromium and serves bridges and proxy connections until
// Chromium exits or ctx ends (then Chromium is asked to stop, and killed
// after 10 s). As PID 1 it reaps every orphan.
func Run(ctx context.Context, cfg Config) error {
	for _, dir := range []string{browserapi.UploadDir, browserapi.DownloadDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	chromeIn, toChrome, err := os.Pipe()
	if err != nil {
		return err
	}
	fromChrome, chromeOut, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(cfg.Chromium, append(Flags(), cfg.Extra...)...)
	cmd.ExtraFiles = []*os.File{chromeIn, chromeOut} // fds 3 and 4
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = []string{"HOME=/tmp", "PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start chromium: %w", err)
	}
	chromeIn.Close()
	chromeOut.Close()
	b := &box{toChrome: toChrome}

	_ = os.Remove(browserapi.BridgeSocket)
	bl, err := net.Listen("unix", browserapi.BridgeSocket)
	if err != nil {
		return err
	}
	_ = os.Chmod(browserapi.BridgeSocket, 0o600)
	pl, err := net.Listen("tcp", browserapi.ProxyAddr)
	if err != nil {
		return err
	}
	go b.acceptBridges(bl)
	go b.acceptProxy(pl)
	go b.fromChrome(fromChrome)

	exited := make(chan syscall.WaitStatus, 1)
	go reap(cmd.Process.Pid, exited)
	select {
	case ws := <-exited:
		return fmt.Errorf("chromium exited: %v", ws)
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
	}
	return nil
}

// reap waits for every child (PID 1 inherits Chromium's orphans) and says
// when Chromium itself exits.
func reap(chromium int, exited chan<- syscall.WaitStatus) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond) // no child right now
			continue
		}
		if pid == chromium {
			exited <- ws
		}
	}
}

// acceptBridges takes each new bridge as the session, closing the last
// one: a manager that restarted starts a new bridge.
func (b *box) acceptBridges(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s, err := yamux.Server(c, browserapi.Session())
		if err != nil {
			c.Close()
			continue
		}
		b.mu.Lock()
		old := b.session
		b.session = s
		b.mu.Unlock()
		if old != nil {
			old.Close()
		}
		go b.serve(s)
	}
}

// serve takes the streams the manager opens on s.
func (b *box) serve(s *yamux.Session) {
	for {
		st, err := s.Accept()
		if err != nil {
			return
		}
		go b.stream(st)
	}
}

func (b *box) stream(st net.Conn) {
	var kind [1]byte
	if _, err := io.ReadFull(st, kind[:]); err != nil {
		st.Close()
		return
	}
	switch kind[0] {
	case browserapi.StreamCDP:
		b.toChromeFrom(st)
	case browserapi.StreamFile:
		if err := receiveFile(st); err != nil {
			slog.Warn("browser: upload", "err", err)
		}
	case browserapi.StreamDownload:
		if err := sendDownload(st); err != nil {
			slog.Warn("browser: download", "err", err)
		}
	case browserapi.StreamSaveCookies:
		if err := saveCookies(st); err != nil {
			slog.Warn("browser: save cookies", "err", err)
		}
	case browserapi.StreamLoadCookies:
		b, _ := os.ReadFile(browserapi.CookieFile)
		_, _ = st.Write(b)
		st.Close()
	default:
		st.Close()
	}
}

// toChromeFrom makes st the CDP stream and copies its messages to
// Chromium, whole messages only: a stream cut mid-message leaves nothing
// half-written for the next one.
func (b *box) toChromeFrom(st net.Conn) {
	b.mu.Lock()
	old := b.cdp
	b.cdp = st
	b.mu.Unlock()
	if old != nil {
		old.Close()
	}
	r := bufio.NewReaderSize(st, 1<<16)
	for {
		msg, err := r.ReadBytes(0)
		if err != nil {
			break
		}
		b.writeMu.Lock()
		_, err = b.toChrome.Write(msg)
		b.writeMu.Unlock()
		if err != nil {
			break
		}
	}
	st.Close()
	b.mu.Lock()
	if b.cdp == st {
		b.cdp = nil
	}
	b.mu.Unlock()
}

// fromChrome copies Chromium's messages to the current CDP stream, whole;
// with none, they are dropped (answers to a manager that went away).
func (b *box) fromChrome(f *os.File) {
	r := bufio.NewReaderSize(f, 1<<16)
	for {
		msg, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		b.mu.Lock()
		st := b.cdp
		b.mu.Unlock()
		if st != nil {
			_ = st.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := st.Write(msg); err != nil {
				st.Close()
			}
		}
	}
}

// acceptProxy hands each connection Chromium makes to its proxy to the
// manager, unread; with no bridge, the connection is closed (no way out).
func (b *box) acceptProxy(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			b.mu.Lock()
			s := b.session
			b.mu.Unlock()
			if s == nil {
				return
			}
			st, err := s.Open()
			if err != nil {
				return
			}
			defer st.Close()
			if _, err := st.Write([]byte{browserapi.StreamProxy}); err != nil {
				return
			}
			splice(c, st)
		}()
	}
}

// splice copies both ways until either side ends.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(a, b); done <- struct{}{} }()
	go func() { _, _ = io.Copy(b, a); done <- struct{}{} }()
	<-done
}
