package webpushtest

import (
	"bytes"
	"crypto/ecdh"
	"testing"
)

var b64 = Base64

// The example of RFC 8291 section 5 (its keys in Appendix A) opens to its
// plaintext: the decryptor the other tests trust is right.
func TestDecryptRFC8291Example(t *testing.T) {
	ua, err := ecdh.P256().NewPrivateKey(b64(t, "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ua.PublicKey().Bytes(), b64(t, `BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcx
		aOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4`)) {
		t.Fatal("the receiver's private key does not give the RFC's public key")
	}
	as, err := ecdh.P256().NewPrivateKey(b64(t, "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
	if err != nil {
		t.Fatal(err)
	}
	asPublic := b64(t, `BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIg
		Dll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8`)
	if !bytes.Equal(as.PublicKey().Bytes(), asPublic) {
		t.Fatal("the sender's private key does not give the RFC's public key")
	}
	auth := b64(t, "BTBZMqHH6r4Tts7J_aSIgg")
	body := b64(t, `DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27ml
		mlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPT
		pK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN`)
	if !bytes.Equal(body[:16], b64(t, "DGv6ra1nlYgDCS1FRnbzlw")) || !bytes.Equal(body[21:86], asPublic) {
		t.Fatal("the body's header is not the RFC's salt and sender key")
	}
	got, err := Decrypt(body, ua, auth)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "When I grow up, I want to be a watermelon" {
		t.Fatalf("plaintext %q", got)
	}
	// A wrong secret or a flipped byte is refused, not misread.
	if _, err := Decrypt(body, ua, make([]byte, 16)); err == nil {
		t.Fatal("opened with the wrong auth secret")
	}
	tampered := bytes.Clone(body)
	tampered[len(tampered)-1] ^= 1
	if _, err := Decrypt(tampered, ua, auth); err == nil {
		t.Fatal("opened a tampered body")
	}
}
