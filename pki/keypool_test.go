package pki

import (
	"crypto/rand"
	"crypto/rsa"
	"testing"
)

// TestRSAKeysReuseUnusedKeys: a key given back is handed out again; a full pool drops what it
// cannot hold, and a key of another size is never handed out.
func TestRSAKeysReuseUnusedKeys(t *testing.T) {
	keys := NewRSAKeys(1024, 1)
	a, err := keys.Take()
	if err != nil || a.N.BitLen() != 1024 {
		t.Fatalf("take from an empty pool: %v", err)
	}
	keys.Put(a)
	b, _ := keys.Take()
	if b != a {
		t.Error("a key given back was not handed out again")
	}
	other, _ := rsa.GenerateKey(rand.Reader, 512)
	keys.Put(other)
	if c, _ := keys.Take(); c == other {
		t.Error("a key of another size was handed out")
	}
	keys.Put(a)
	keys.Put(b) // the pool holds one: dropped, not blocked on
	if len(keys.pool) != 1 {
		t.Errorf("pool holds %d keys, want 1", len(keys.pool))
	}
}
