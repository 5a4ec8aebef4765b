// Package webpushtest is the browser's side of Web Push for tests: it
// opens what a push service would hand a browser (RFC 8291 message
// encryption over RFC 8188's aes128gcm), written from the RFCs alone so
// that it checks the sending library rather than repeating it. The
// manager's unit tests and the e2e suite decrypt pushes with it; its own
// test opens RFC 8291's example.
package webpushtest

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"golang.org/x/crypto/hkdf"
)

// Decrypt is the browser's side of Web Push message encryption: it opens
// an aes128gcm body (RFC 8188) whose key comes from RFC 8291's derivation,
// with the user agent's private key ua and authentication secret auth.
// Written from the RFCs alone, so it checks the library rather than
// repeating it.
func Decrypt(body []byte, ua *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	// Header: salt (16) | rs (4) | idlen (1) | keyid (idlen): the sender's public key.
	if len(body) < 21 {
		return nil, errors.New("short header")
	}
	salt, rs, idlen := body[:16], int(binary.BigEndian.Uint32(body[16:20])), int(body[20])
	if rs < 18 || len(body) < 21+idlen {
		return nil, fmt.Errorf("bad header: rs %d, idlen %d", rs, idlen)
	}
	asPublic, err := ecdh.P256().NewPublicKey(body[21 : 21+idlen])
	if err != nil {
		return nil, fmt.Errorf("keyid is not a P-256 key: %w", err)
	}
	shared, err := ua.ECDH(asPublic)
	if err != nil {
		return nil, err
	}
	// RFC 8291 section 3.4: IKM from the shared secret, salted with auth.
	info := append(append([]byte("WebPush: info\x00"), ua.PublicKey().Bytes()...), asPublic.Bytes()...)
	ikm := derive(shared, auth, info, 32)
	// RFC 8188 section 2.2 and 2.3: the content key and the nonce.
	cek := derive(ikm, salt, []byte("Content-Encoding: aes128gcm\x00"), 16)
	nonce := derive(ikm, salt, []byte("Content-Encoding: nonce\x00"), 12)
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	var out []byte
	records := body[21+idlen:]
	for seq := uint64(0); len(records) > 0; seq++ {
		n := min(rs, len(records))
		rec := records[:n]
		records = records[n:]
		iv := bytes.Clone(nonce)
		for i := range 8 { // the record's sequence number, XORed into the nonce's low bytes
			iv[11-i] ^= byte(seq >> (8 * i))
		}
		plain, err := gcm.Open(nil, iv, rec, nil)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", seq, err)
		}
		// Padding: a delimiter (2 in the last record, 1 before it), then zeros.
		end := len(plain) - 1
		for end >= 0 && plain[end] == 0 {
			end--
		}
		last := len(records) == 0
		if end < 0 || (last && plain[end] != 2) || (!last && plain[end] != 1) {
			return nil, fmt.Errorf("record %d: bad padding delimiter", seq)
		}
		out = append(out, plain[:end]...)
	}
	return out, nil
}

func derive(secret, salt, info []byte, n int) []byte {
	b := make([]byte, n)
	if _, err := io.ReadFull(hkdf.New(sha256.New, secret, salt, info), b); err != nil {
		panic(err)
	}
	return b
}

// Base64 decodes base64url without padding (whitespace ignored: RFC
// examples wrap their lines), failing t on bad input.
func Base64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return b
}
