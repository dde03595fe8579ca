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

// A labeled tunnel's bind, which presents no id, takes its own session's pending row with the
// same labels, once: a second bind with those labels gets a row of its own. Pending labeled rows
// count for their account's tunnel groups alone (the group's labels a subset of the row's):
// account b's row with the same labels neither is taken by a's binds nor keeps a's group
// moving, and a's bind leaves b's pending.
func TestRebindsLabeledByAccount(t *testing.T) {
	r := newRebinds()
	sa := &session{cred: store.AgentCredential{AccountID: "acct_a"}}
	sb := &session{cred: store.AgentCredential{AccountID: "acct_b"}}
	labels := map[string]string{"edge": "x", "tier": "web"}
	r.take(sa, []store.KeptTunnel{{ID: "tn_a", Labels: labels}})
	r.take(sb, []store.KeptTunnel{{ID: "tn_b", Labels: labels}})
	for _, acct := range []string{"acct_a", "acct_b"} {
		if !r.pendingLabels(acct, map[string]string{"edge": "x"}) {
			t.Errorf("%s's group of edge=x is not pending with a row of its labels taken over", acct)
		}
	}
	if r.pendingLabels("acct_a", map[string]string{"edge": "y"}) || r.pendingLabels("acct_c", labels) {
		t.Error("a group whose labels no pending row of its account has is pending")
	}
	first := &Tunnel{sess: sa, labels: map[string]string{"tier": "web", "edge": "x"}, rowID: "tn_new1"}
	r.adopt(sa, first)
	if first.rowID != "tn_a" {
		t.Errorf("a's labeled bind got row %s, want its session's tn_a", first.rowID)
	}
	second := &Tunnel{sess: sa, labels: labels, rowID: "tn_new2"}
	r.adopt(sa, second)
	other := &Tunnel{sess: sa, labels: map[string]string{"edge": "x"}, rowID: "tn_new3"}
	r.adopt(sa, other)
	if second.rowID != "tn_new2" || other.rowID != "tn_new3" {
		t.Errorf("binds took rows %s and %s: a row already taken, or one of other labels", second.rowID, other.rowID)
	}
	r.bound(first.rowID)
	if r.pendingLabels("acct_a", labels) {
		t.Error("a's group still pending once its tunnel is bound again")
	}
	if !r.pendingRow("tn_b") || !r.pendingLabels("acct_b", labels) {
		t.Error("b's row stopped pending with a's bind")
	}
	if r.forgetSession(sa) || !r.forgetSession(sb) || len(r.labeled) != 0 || len(r.byRow) != 0 {
		t.Errorf("indexes left: %d accounts, %d rows", len(r.labeled), len(r.byRow))
	}
	// A row of neither kind (a labeled row whose labels could not be read) is no bind's to take:
	// take says so, and only the takeover's deadline deletes it.
	if !r.take(sa, []store.KeptTunnel{{ID: "tn_unread"}}) || r.take(sa, []store.KeptTunnel{{ID: "tn_l", Labels: labels}}) {
		t.Error("take does not tell the rows no bind can take from the others")
	}
	if r.pendingRow("tn_unread") {
		t.Error("a row no bind can take is pending")
	}
}
