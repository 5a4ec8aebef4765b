package server

import (
	"net/url"
	"strings"
	"testing"
)

// resolveQuery answers what url.ParseQuery's first values would: a user
// smuggled into the path, a repeated or escaped key, a semicolon, a bad
// escape must not mean one thing to the authorization and another to
// the Resolver.
func FuzzResolveQuery(f *testing.F) {
	for _, s := range []string{
		"user=alice&path=/prompt", "user=alice&path=/a&user=bob", "user=bob;x&user=alice", "us%65r=bob&user=alice",
		"user=%zz&user=alice", "user=a+b&path=%2Fx%20y", "&&user=&path=", "path=/p", "user", "user=a=b",
		"user=alice&path=/x;y&path=/z", strings.Repeat("x=1&", 9) + "user=alice", strings.Repeat("&", 7) + "user=a",
		"user=al%00ice", "USER=bob&user=alice", "user=%E2%82%AC",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw)
		user, path := resolveQuery(raw)
		if user != q.Get("user") || path != q.Get("path") {
			t.Fatalf("%q: user %q path %q, url.ParseQuery: %q %q", raw, user, path, q.Get("user"), q.Get("path"))
		}
	})
}
