package agentdb

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
)

// ErrTooManyTunnels is Connect's refusal past MaxTunnels for one user.
var ErrTooManyTunnels = errors.New("too many storage connections open")

// ErrNotUpgrade is Connect's refusal of a request that does not ask for
// the storage protocol.
var ErrNotUpgrade = errors.New("the storage connection is an upgrade to " + gatewayapi.StorageUpgrade)

// Protocol codes of a startup packet (the Postgres frontend protocol).
const (
	protocol3   = 196608   // 3.0: a StartupMessage
	sslRequest  = 80877103 // answered N: the tunnel is the transport
	gssRequest  = 80877104 // answered N
	maxStartup  = 10000    // bytes, as the server's own limit
	startupTime = 10 * time.Second
)

// startupParams are the parameters a StartupMessage may carry: user and
// database (checked), and session settings a driver sends. Anything else
// (replication, options, which can set any GUC) is refused.
var startupParams = map[string]bool{
	"user": true, "database": true, "search_path": true, "application_name": true,
	"client_encoding": true, "datestyle": true, "timezone": true, "extra_float_digits": true,
	"intervalstyle": true, "standard_conforming_strings": true,
}

// Connect serves GET /v1/gateway/storage/connect for user (already
// authenticated by its sandbox token): it answers 101, reads the client's
// startup packet, admits it only as user's role to user's database, and
// from then on copies bytes both ways until either side closes. Errors
// before the 101 are returned (the caller answers them); after it, a
// refused startup gets a Postgres ErrorResponse and the connection closes.
func (s *Store) Connect(w http.ResponseWriter, r *http.Request, user string) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), gatewayapi.StorageUpgrade) {
		return ErrNotUpgrade
	}
	// The cap first: a sandbox flooding this route costs no query.
	if !s.open(user) {
		return ErrTooManyTunnels
	}
	defer s.done(user)
	c, err := s.Credential(r.Context(), user)
	if err != nil {
		return err
	}
	server, err := s.dial(r.Context())
	if err != nil {
		return fmt.Errorf("reach the agents' database: %w", err)
	}
	defer server.Close()
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("storage connection: %w", err)
	}
	defer client.Close()
	// Until the session is ready (startup, authentication), both sides
	// have startupTime: a client that never answers the password exchange
	// holds no Postgres slot for long.
	deadline := time.Now().Add(startupTime)
	_ = client.SetDeadline(deadline)
	_ = server.SetDeadline(deadline)
	if _, err := buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + gatewayapi.StorageUpgrade + "\r\n\r\n"); err != nil {
		return nil
	}
	if err := buf.Flush(); err != nil {
		return nil
	}
	startup, err := readStartup(buf.Reader, client)
	if err == nil {
		err = admit(startup, c)
	}
	if err != nil {
		_, _ = client.Write(fatal(err.Error()))
		return nil
	}
	if _, err := server.Write(startup); err != nil {
		return nil
	}
	splice(client, buf.Reader, server)
	return nil
}

// open counts a tunnel of user's, false past MaxTunnels.
func (s *Store) open(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tunnels[user] >= MaxTunnels {
		return false
	}
	s.tunnels[user]++
	return true
}

func (s *Store) done(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tunnels[user]--; s.tunnels[user] <= 0 {
		delete(s.tunnels, user)
	}
}

// readStartup reads packets until a StartupMessage, answering SSL and GSS
// encryption requests with N; it returns the StartupMessage as read.
func readStartup(r *bufio.Reader, w io.Writer) ([]byte, error) {
	for range 3 {
		var head [8]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return nil, fmt.Errorf("read the startup packet: %w", err)
		}
		n := binary.BigEndian.Uint32(head[:4])
		code := binary.BigEndian.Uint32(head[4:])
		if n < 8 || n > maxStartup {
			return nil, fmt.Errorf("a startup packet of %d bytes", n)
		}
		switch code {
		case sslRequest, gssRequest:
			if n != 8 {
				return nil, errors.New("a malformed encryption request")
			}
			if _, err := w.Write([]byte{'N'}); err != nil {
				return nil, err
			}
			continue
		case protocol3:
			msg := make([]byte, n)
			copy(msg, head[:])
			if _, err := io.ReadFull(r, msg[8:]); err != nil {
				return nil, fmt.Errorf("read the startup packet: %w", err)
			}
			return msg, nil
		default:
			return nil, fmt.Errorf("only a protocol 3.0 startup is relayed (not code %d)", code)
		}
	}
	return nil, errors.New("no startup packet")
}

// admit checks a StartupMessage: user's role, user's database, and only
// the parameters of startupParams.
func admit(msg []byte, c gatewayapi.StorageCredential) error {
	fields := strings.Split(string(msg[8:]), "\x00")
	// name, value, ..., "", "" (the terminator and the split's tail)
	if len(fields) < 2 || fields[len(fields)-1] != "" || fields[len(fields)-2] != "" || len(fields)%2 != 0 {
		return errors.New("a malformed startup packet")
	}
	params := map[string]string{}
	for i := 0; i+1 < len(fields)-2; i += 2 {
		name := strings.ToLower(fields[i])
		if !startupParams[name] {
			return fmt.Errorf("the startup parameter %q is not relayed", fields[i])
		}
		if _, dup := params[name]; dup {
			return fmt.Errorf("the startup parameter %q twice", fields[i])
		}
		params[name] = fields[i+1]
	}
	if params["user"] != c.Role {
		return fmt.Errorf("this tunnel admits the role %s only", c.Role)
	}
	db := params["database"]
	if db == "" {
		db = params["user"] // the server's default
	}
	if db != c.Database {
		return fmt.Errorf("this tunnel admits the database %s only", c.Database)
	}
	return nil
}

// fatal is a Postgres ErrorResponse (severity FATAL, invalid
// authorization) carrying msg, which a driver shows as the error.
func fatal(msg string) []byte {
	body := []byte{}
	for _, f := range []struct {
		code byte
		val  string
	}{{'S', "FATAL"}, {'V', "FATAL"}, {'C', "28000"}, {'M', "affido storage relay: " + msg}} {
		body = append(append(append(body, f.code), f.val...), 0)
	}
	body = append(body, 0)
	out := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(body)+4))
	return append(out, body...)
}

// splice copies client to server (reading through buffered, which may hold
// bytes already read from client) and server to client until either ends,
// then closes both. The server's messages are read one by one until its
// first ReadyForQuery, the end of authentication; only then are the
// startup deadlines lifted.
func splice(client net.Conn, buffered *bufio.Reader, server net.Conn) {
	var once sync.Once
	end := func() { once.Do(func() { client.Close(); server.Close() }) }
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(server, buffered); end() }()
	go func() {
		defer wg.Done()
		defer end()
		if err := untilReady(client, server); err != nil {
			return
		}
		_ = client.SetDeadline(time.Time{})
		_ = server.SetDeadline(time.Time{})
		_, _ = io.Copy(client, server)
	}()
	wg.Wait()
}

// untilReady forwards the server's messages to dst until a ReadyForQuery
// ('Z'). Startup messages are small; a longer one is an error.
func untilReady(dst io.Writer, src io.Reader) error {
	var head [5]byte
	for {
		if _, err := io.ReadFull(src, head[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(head[1:])
		if n < 4 || n > maxStartup {
			return fmt.Errorf("a startup message of %d bytes", n)
		}
		if _, err := dst.Write(head[:]); err != nil {
			return err
		}
		if _, err := io.CopyN(dst, src, int64(n-4)); err != nil {
			return err
		}
		if head[0] == 'Z' {
			return nil
		}
	}
}
