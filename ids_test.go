package edgeplane

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/ksuid"
)

// Operation ids are ids of the "op" prefix, carry the time they were made, and do not repeat.
func TestNewOperationID(t *testing.T) {
	seen := map[string]bool{}
	before := time.Now().Truncate(time.Second)
	for range 10000 {
		id := NewOperationID()
		if !ValidID("op", id) {
			t.Fatalf("%q is not an operation id", id)
		}
		if seen[id] {
			t.Fatalf("%q repeated", id)
		}
		seen[id] = true
		k, _ := ksuid.Parse(id[len("op_"):])
		if k.Time().Before(before) || k.Time().After(time.Now()) {
			t.Fatalf("%q carries %s, not the time it was made", id, k.Time())
		}
	}
}

// TestValidIDAlphabet: an id with a byte outside base62 is not valid, whatever ksuid.Parse says.
func TestValidIDAlphabet(t *testing.T) {
	id, _ := NewID("ipp")
	if !ValidID("ipp", id) {
		t.Fatalf("a new id %q is not valid", id)
	}
	for _, bad := range []string{id[:10] + "\xff" + id[11:], id[:10] + "_" + id[11:], id[:10] + " " + id[11:]} {
		if ValidID("ipp", bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

// The operation ids' and ids' encoder writes what ksuid's does, from the smallest KSUID to the
// largest and for random ones between.
func TestAppendKSUID(t *testing.T) {
	ks := []ksuid.KSUID{ksuid.Nil, ksuid.Max, ksuid.New()}
	for i := range 20 {
		var k ksuid.KSUID
		k[19-i] = 1
		ks = append(ks, k)
		k[19-i] = 0xff
		ks = append(ks, k)
	}
	for range 10000 {
		ks = append(ks, ksuid.New())
		k := ksuid.New()
		k[0] = 0xff
		ks = append(ks, k)
	}
	for _, k := range ks {
		if got, want := string(appendKSUID(nil, k)), k.String(); got != want {
			t.Fatalf("appendKSUID(%x) = %q, want %q", k[:], got, want)
		}
	}
}

// A token's selector is accepted exactly when ksuid.Parse takes it: every string of base62
// digits up to the largest KSUID and none above it, and strings with other bytes as ksuid.Parse
// says.
func TestTokenSelectorAsKSUIDParses(t *testing.T) {
	secret := strings.Repeat("A", 52)
	sels := []string{maxKSUID, ksuid.Nil.String(), "aWgEPTl1tmebfsQzFP4bxwgy80W", "aWgEPTl1tmebfsQzFP4bxwgy80U",
		"aWgEPTl1tmebfsQzFP4bxwgy81V", "b00000000000000000000000000", "zzzzzzzzzzzzzzzzzzzzzzzzzzz",
		"ZZZZZZZZZZZZZZZZZZZZZZZZZZZ", "aWgEPTl1tmebfsQzFP4bxwgy80\xff", "\x00WgEPTl1tmebfsQzFP4bxwgy80V",
		"aWgEPTl1tmeb sQzFP4bxwgy80V", "{{{{{{{{{{{{{{{{{{{{{{{{{{{", "///////////////////////////"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, 27)
		for i := range b {
			b[i] = base62[rng.IntN(62)]
		}
		if c := byte(rng.IntN(256)); rng.IntN(4) == 0 && c != '_' { // '_' would split the token elsewhere
			b[rng.IntN(27)] = c
		}
		sels = append(sels, string(b))
	}
	for _, sel := range sels {
		_, err := ksuid.Parse(sel)
		if _, _, ok := ParseToken(sel + "_" + secret); ok != (err == nil) {
			t.Fatalf("ParseToken with selector %q: %v, ksuid.Parse says %v", sel, ok, err)
		}
		if ok := ValidID("ak", "ak_"+sel); ok && err != nil {
			t.Fatalf("ValidID takes %q, which ksuid.Parse refuses", sel)
		}
	}
}

// ValidID takes the prefix, then '_', then the KSUID, and nothing else: a prefix that is only a
// beginning of the id's, another separator, or a KSUID too short or too long is refused.
func TestValidIDPrefix(t *testing.T) {
	id, _ := NewID("ipp")
	k := id[len("ipp_"):]
	if !ValidID("ipp", "ipp_"+k) {
		t.Fatalf("%q is not valid", id)
	}
	for _, bad := range []struct{ prefix, s string }{
		{"ip", id}, {"ippx", id}, {"ipp", "ipp-" + k}, {"ipp", "ipq_" + k}, {"ipp", "ipp_" + k[1:]},
		{"ipp", "ipp_" + k + "0"}, {"ipp", k}, {"", k}, {"ipp", ""},
	} {
		if ValidID(bad.prefix, bad.s) {
			t.Errorf("ValidID(%q, %q) = true", bad.prefix, bad.s)
		}
	}
	if !ValidID("", "_"+k) {
		t.Errorf("ValidID(\"\", %q) = false", "_"+k)
	}
}

// A secret matches the hash of itself only, at every length around the 64 bytes hashed from the
// stack, and a hash of another length matches nothing.
func TestSecretMatches(t *testing.T) {
	for _, n := range []int{0, 1, 31, 32, 33, 52, 63, 64, 65, 200} {
		secret := strings.Repeat("A", n)
		hash := HashSecret(secret)
		if !SecretMatches(secret, hash) {
			t.Errorf("a secret of %d bytes does not match its hash", n)
		}
		if SecretMatches(secret+"B", hash) || (n > 0 && SecretMatches(secret[:n-1]+"B", hash)) {
			t.Errorf("another secret matches the hash of one of %d bytes", n)
		}
		if SecretMatches(secret, hash[:len(hash)-1]) {
			t.Errorf("a short hash matches a secret of %d bytes", n)
		}
	}
}

// A token's secret is accepted exactly when every byte of it is in its base32 alphabet (A-Z,
// 2-7), whichever byte and wherever it stands.
func TestTokenSecretAlphabet(t *testing.T) {
	selector := ksuid.New().String()
	for pos := range 52 {
		for c := range 256 {
			if c == '_' {
				continue // it would end the selector elsewhere
			}
			b := []byte(strings.Repeat("A", 52))
			b[pos] = byte(c)
			want := c >= 'A' && c <= 'Z' || c >= '2' && c <= '7'
			if _, _, ok := ParseToken(selector + "_" + string(b)); ok != want {
				t.Fatalf("secret with %q at %d: accepted %v, want %v", byte(c), pos, ok, want)
			}
		}
	}
}
