package edgeplane

import (
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
