package account

import (
	"errors"
	"strings"
	"testing"
)

func TestHashAndVerify(t *testing.T) {
	h, err := Hash("correct horse battery", DefaultParams)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q", h)
	}
	if ok, err := Verify("correct horse battery", h); !ok || err != nil {
		t.Fatalf("the right password: %v %v", ok, err)
	}
	if ok, err := Verify("correct horse batterY", h); ok || err != nil {
		t.Fatalf("a wrong password: %v %v", ok, err)
	}
	h2, _ := Hash("correct horse battery", DefaultParams)
	if h2 == h {
		t.Fatal("two hashes of one password share a salt")
	}
	// Cheaper parameters of an older hash still verify.
	old, _ := Hash("correct horse battery", Params{Memory: 1024, Time: 1, Threads: 1})
	if ok, _ := Verify("correct horse battery", old); !ok {
		t.Fatal("a hash with other parameters does not verify")
	}
	for _, bad := range []string{"", "plain", "$argon2i$v=19$m=1,t=1,p=1$AAAA$AAAA", "$argon2id$v=19$m=1,t=0,p=1$AAAA$AAAA", "$argon2id$v=19$m=1,t=1,p=1$!!$AAAA"} {
		if _, err := Verify("x", bad); !errors.Is(err, ErrBadHash) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := Hash("short", DefaultParams); !errors.Is(err, ErrWeakPassword) {
		t.Fatalf("short password: %v", err)
	}
}
