package tunnel

import (
	"testing"

	"github.com/edgeplane/edgeplane/store"
)

// The pending rows are indexed by session as well as by row and endpoint, and the three agree:
// a row taken over again by the agent's newer session is the newer one's alone (the older
// session's end leaves it pending), a bind without its token adopts only its own session's
// row, and once bound the endpoint is pending no more. Account B's row of another endpoint is
// never adopted by A's session, nor dropped with it.
func TestRebindsIndexBySession(t *testing.T) {
	r := newRebinds()
	older, newer, other := &session{}, &session{}, &session{}
	r.take(older, []store.KeptTunnel{{ID: "tn_a", Proto: "https", Name: "A.example.com"}})
	r.take(other, []store.KeptTunnel{{ID: "tn_b", Proto: "https", Name: "b.example.com"}})
	r.take(newer, []store.KeptTunnel{{ID: "tn_a", Proto: "https", Name: "a.example.com"}})

	if r.forgetSession(older) {
		t.Error("the older session's end found rows; the row is the newer session's now")
	}
	keyA := endpointKey{"https", "a.example.com"}
	if !r.pending(keyA) || !r.pendingRow("tn_a") {
		t.Fatal("A's row stopped pending with the older session's end")
	}
	tb := &Tunnel{proto: "https", host: "b.example.com", rowID: "tn_new"}
	r.adopt(newer, tb)
	if tb.rowID != "tn_new" {
		t.Errorf("A's session adopted row %s of B's endpoint", tb.rowID)
	}
	ta := &Tunnel{proto: "https", host: "a.example.com", rowID: "tn_new"}
	r.adopt(newer, ta)
	if ta.rowID != "tn_a" {
		t.Errorf("a bind without its token got row %s, want its session's tn_a", ta.rowID)
	}
	r.bound("tn_a")
	if r.pending(keyA) || r.forgetSession(newer) {
		t.Error("A's endpoint still pending after its bind")
	}
	if !r.pendingRow("tn_b") {
		t.Error("B's row stopped pending with A's sessions")
	}
	if len(r.bySession) != 1 || len(r.byRow) != 1 || len(r.byKey) != 1 {
		t.Errorf("indexes left: %d sessions, %d rows, %d keys; want B's alone", len(r.bySession), len(r.byRow), len(r.byKey))
	}
}
