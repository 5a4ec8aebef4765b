// Package browserapi is the contract between the manager and a user's
// browser sandbox (browserbox, the affido-browser binary), written once.
//
// The sandbox has no network at all (Docker's network mode "none"). Its one
// channel out is a bridge the manager starts in it (an exec of
// "affido-browser bridge", whose standard input and output reach the
// sandbox's main process over a unix socket): one yamux session per bridge.
// Over it the manager opens a CDP stream (Chromium's
// --remote-debugging-pipe, NUL-delimited JSON messages), and the sandbox
// opens one stream per connection Chromium makes to its proxy, which the
// manager serves with its guarded outbound client.
package browserapi

import (
	"io"
	"time"

	"github.com/hashicorp/yamux"
)

// Where things are inside the browser sandbox.
const (
	// BridgeSocket is the main process's socket a bridge connects to.
	BridgeSocket = "/tmp/affido-bridge.sock"
	// ProxyAddr is the proxy Chromium is told to use for everything
	// (loopback included): the main process, which hands each connection to
	// the manager.
	ProxyAddr = "127.0.0.1:3128"
	// ProfileDir is the Chromium profile, on the sandbox's own volume.
	ProfileDir = "/profile"
	// UploadDir holds files the owner allowed a page to be given
	// (browser_upload), on the sandbox's tmpfs.
	UploadDir = "/tmp/uploads"
	// DownloadDir is where Chromium saves what a page downloads, each
	// file named by its download's id (a GUID), on the sandbox's tmpfs:
	// it leaves only when the owner allowed the agent to save it.
	DownloadDir = "/tmp/downloads"
)

// The first byte of every stream says what it carries.
const (
	// StreamCDP (opened by the manager) is Chromium's debugging pipe.
	StreamCDP byte = 'C'
	// StreamProxy (opened by the sandbox) is one connection Chromium made
	// to its proxy, unread: an HTTP proxy request comes first.
	StreamProxy byte = 'P'
	// StreamFile (opened by the manager) writes one file into UploadDir:
	// a line with its base name, then its bytes until the stream ends.
	StreamFile byte = 'F'
	// StreamDownload (opened by the manager) reads one download: a line
	// with its id; answered "ok <size>\n" and its bytes, or an error line.
	StreamDownload byte = 'D'
)

// The sandbox keeps the cookies the manager hands it (a file on the
// profile volume, replaced whole and synced): Chromium writes its own
// cookie store only every half a minute or so, and a sandbox killed
// before that must still come back signed in.
const (
	// StreamSaveCookies (opened by the manager): the cookies, as the
	// manager serialized them, until the stream ends; answered "ok\n".
	StreamSaveCookies byte = 'K'
	// StreamLoadCookies (opened by the manager): answered with the saved
	// cookies (nothing if none).
	StreamLoadCookies byte = 'R'
	// CookieFile is where they are kept.
	CookieFile = ProfileDir + "/affido-cookies.json"
	// MaxCookies bounds the file.
	MaxCookies = 4 << 20
)

// MaxUpload bounds one StreamFile.
const MaxUpload = 16 << 20

// MaxDownload bounds one download: Chromium's is cancelled past it, and
// StreamDownload reads no more (the workspace takes 4 MiB a file).
const MaxDownload = 4 << 20

// Session is the yamux configuration both sides use: a keepalive, so a
// bridge whose other end went away (a manager restart) is noticed.
func Session() *yamux.Config {
	c := yamux.DefaultConfig()
	c.KeepAliveInterval = 10 * time.Second
	c.ConnectionWriteTimeout = 10 * time.Second
	c.AcceptBacklog = 128
	c.LogOutput = io.Discard
	return c
}
