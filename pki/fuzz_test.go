package pki

import (
	"bytes"
	"strings"
	"testing"
)

// Fuzz targets of the parsers that read what users upload: PEM certificates and private keys
// (TLS certificates, certificate authorities) and OpenSSH public keys (SSH certificates). `go
// test` runs them on their seed corpora (testdata/fuzz/<name>, real keys and certificates and
// damaged ones); `go test -run=^$ -fuzz=^FuzzParseCertificates$ ./pki` explores further.

// FuzzParseCertificates: never panics; whatever parses is re-encoded canonically, and the
// canonical text parses again to the same certificates (what the API stores and shows is what it
// accepted). The fields the API derives from a certificate are derived without panicking.
func FuzzParseCertificates(f *testing.F) {
	f.Add("")
	f.Add("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	f.Add("Bag Attributes\n-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n-----BEGIN ")
	f.Fuzz(func(t *testing.T, text string) {
		certs, err := ParseCertificates(text)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error message")
			}
			return
		}
		if len(certs) == 0 {
			t.Fatalf("ParseCertificates(%q) accepted no certificate", text)
		}
		canonical := EncodeCertificates(certs)
		again, err := ParseCertificates(canonical)
		if err != nil || len(again) != len(certs) {
			t.Fatalf("the canonical form of %d certificates does not parse back: %d, %v", len(certs), len(again), err)
		}
		for i := range certs {
			if !bytes.Equal(again[i].Raw, certs[i].Raw) {
				t.Fatalf("certificate %d changed in the round trip", i+1)
			}
			c := certs[i]
			_, _, _, _ = KeyUsages(c), ExtKeyUsages(c), IPs(c), CACheck(c)
			_, _ = KeyType(c.PublicKey), describe(c)
		}
		_ = CheckChain(certs)
		if EncodeCertificates(again) != canonical {
			t.Fatal("the canonical form is not a fixed point")
		}
	})
}

// FuzzParsePrivateKey: never panics; a key it accepts has a supported type, and its canonical PEM
// parses again to the same key (the stored secret is what was uploaded).
func FuzzParsePrivateKey(f *testing.F) {
	f.Add("")
	f.Add("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n")
	f.Add("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n")
	f.Fuzz(func(t *testing.T, text string) {
		key, canonical, err := ParsePrivateKey(text)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error message")
			}
			return
		}
		if KeyType(key.Public()) == "" {
			t.Fatalf("accepted a key of unsupported type %T", key)
		}
		again, canonical2, err := ParsePrivateKey(canonical)
		if err != nil {
			t.Fatalf("the canonical PEM of an accepted key does not parse: %v\n%s", err, canonical)
		}
		if !SamePublicKey(key.Public(), again.Public()) || canonical2 != canonical {
			t.Fatal("the canonical PEM does not parse back to the same key")
		}
	})
}

// FuzzParseAuthorizedKey: never panics; a key it accepts comes back as "<type> <base64>" without
// a comment, and that canonical line parses again to itself with the same key type.
func FuzzParseAuthorizedKey(f *testing.F) {
	f.Add("")
	f.Add("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDS4bFrsXNKCYBk0n5pN3Ewc3PfF8Lk4d39nALVDsgnq user@host")
	f.Add(`no-pty ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDS4bFrsXNKCYBk0n5pN3Ewc3PfF8Lk4d39nALVDsgnq`)
	f.Fuzz(func(t *testing.T, text string) {
		canonical, keyType, err := ParseAuthorizedKey(text)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error message")
			}
			return
		}
		if keyType != KeyRSA && keyType != KeyECDSA && keyType != KeyEd25519 {
			t.Fatalf("accepted key type %q", keyType)
		}
		if fields := strings.Fields(canonical); len(fields) != 2 || fields[0]+" "+fields[1] != canonical {
			t.Fatalf("canonical form %q is not \"<type> <base64>\"", canonical)
		}
		again, keyType2, err := ParseAuthorizedKey(canonical)
		if err != nil || again != canonical || keyType2 != keyType {
			t.Fatalf("canonical %q parses to %q (%s), %v", canonical, again, keyType2, err)
		}
	})
}
