package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// holdsWorld is a store with two accounts, each with an online session on a replica of its own.
type holdsWorld struct {
	t    *testing.T
	s    *Store
	a, b ep.Caller
	ctx  context.Context
}

func newHoldsWorld(t *testing.T, dsn string) *holdsWorld {
	t.Helper()
	s := openStore(t, dsn)
	w := &holdsWorld{t: t, s: s, a: ensureAccount(t, s, "a"), b: ensureAccount(t, s, "b"), ctx: context.Background()}
	w.session(w.a, "ts_a", "rep_a")
	w.session(w.b, "ts_b", "rep_b")
	return w
}

func (w *holdsWorld) session(c ep.Caller, id, replica string) {
	w.t.Helper()
	body, _ := json.Marshal(ep.TunnelSession{Meta: ep.Meta{ID: id}})
	if _, err := w.s.PutAgentSession(w.ctx, AgentSessionRow{ID: id, AccountID: c.AccountID, CredentialID: "cr_" + id,
		Replica: replica, Conn: "conn_" + id, Doc: body}); err != nil {
		w.t.Fatal(err)
	}
}

// bind records a tunnel of the session's account online on name.
func (w *holdsWorld) bind(c ep.Caller, session, id, name string) error {
	body, _ := json.Marshal(ep.Tunnel{Meta: ep.Meta{ID: id}})
	return w.s.PutAgentTunnel(w.ctx, AgentTunnelRow{ID: id, SessionID: session, AccountID: c.AccountID, Name: name, Doc: body})
}

func (w *holdsWorld) reserve(c ep.Caller, name string) error {
	body := &ep.ReservedDomainCreate{Domain: &name}
	if err := body.Validate(); err != nil {
		return err
	}
	_, err := w.s.Create(w.ctx, c, ep.ReservedDomains, "", body)
	return err
}

func (w *holdsWorld) reserveAddr(c ep.Caller) (string, error) {
	d, err := w.s.Create(w.ctx, c, ep.ReservedAddrs, "", &ep.ReservedAddrCreate{})
	if err != nil {
		return "", err
	}
	return d.(*ep.ReservedAddr).Addr, nil
}

// must fails the test on err.
func (w *holdsWorld) must(err error, what string) {
	w.t.Helper()
	if err != nil {
		w.t.Fatalf("%s: %v", what, err)
	}
}

// wantOnline expects the 409 ERR_NGROK_430 of a reservation over another account's online
// name: naming the name, and none of that account's ids.
func (w *holdsWorld) wantOnline(err error, name string) {
	w.t.Helper()
	var e *ep.Error
	if !errors.As(err, &e) || e.Status != 409 || e.Code != ep.CodeDomainOnline {
		w.t.Fatalf("reserving %s: %v, want 409 ERR_NGROK_430", name, err)
	}
	if !strings.Contains(e.Msg, fmt.Sprintf("%q", name)) {
		w.t.Errorf("the refusal does not name %s: %q", name, e.Msg)
	}
	for _, id := range []string{w.a.AccountID, "ts_a", "tn_", "cr_", "rep_a"} {
		if strings.Contains(e.Msg, id) {
			w.t.Errorf("the refusal shows another account's id %s: %q", id, e.Msg)
		}
	}
}

// TestNameHolds: a name is held by one account at a time, in every order of events: a name
// online for one account can be neither reserved (exactly, or by a wildcard that would cover it)
// nor bound by another; a reserved name (or one under another account's wildcard) cannot be
// bound by anyone else; the holder's own binds (pooled, other protocols) and reservations are
// taken; a name is free again once its tunnels are gone.
func TestNameHolds(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn)
		a, b := w.a, w.b

		// Bind first.
		w.must(w.bind(a, "ts_a", "tn_a1", "svc-a.edgeplane.app"), "A's bind")
		w.wantOnline(w.reserve(b, "svc-a.edgeplane.app"), "svc-a.edgeplane.app")
		if err := w.bind(b, "ts_b", "tn_b1", "svc-a.edgeplane.app"); !errors.Is(err, ErrNameOnline) {
			t.Errorf("B's bind of A's online name: %v, want ErrNameOnline", err)
		}
		w.must(w.bind(a, "ts_a", "tn_a2", "svc-a.edgeplane.app"), "A's second (pooled) bind")
		// A wildcard over a name online for another account; a name further down is not
		// covered by it (a wildcard covers one level, as for reservations).
		w.must(w.bind(a, "ts_a", "tn_a3", "app.zone.edgeplane.app"), "A's bind under a zone")
		w.wantOnline(w.reserve(b, "*.zone.edgeplane.app"), "*.zone.edgeplane.app")
		w.must(w.bind(a, "ts_a", "tn_a4", "deep.app.zone2.edgeplane.app"), "A's deep bind")
		w.must(w.reserve(b, "*.zone2.edgeplane.app"), "B's wildcard above a deeper name")
		// A name its holder reserved exactly is not covered by another account's wildcard.
		w.must(w.reserve(a, "x.zone3.example.com"), "A's reservation")
		w.must(w.bind(a, "ts_a", "tn_a5", "x.zone3.example.com"), "A's bind of its reservation")
		w.must(w.reserve(b, "*.zone3.example.com"), "B's wildcard beside A's exact name")
		// The holder itself may reserve its online name.
		w.must(w.bind(a, "ts_a", "tn_a6", "mine.edgeplane.app"), "A's bind")
		w.must(w.reserve(a, "mine.edgeplane.app"), "A reserving its own online name")

		// Reservation first: exact, then a wildcard.
		w.must(w.reserve(b, "b-first.edgeplane.app"), "B's reservation")
		if err := w.bind(a, "ts_a", "tn_a7", "b-first.edgeplane.app"); !errors.Is(err, ErrNameReserved) {
			t.Errorf("A's bind of B's reserved name: %v, want ErrNameReserved", err)
		}
		w.must(w.reserve(b, "*.bz.example.com"), "B's wildcard")
		if err := w.bind(a, "ts_a", "tn_a8", "n.bz.example.com"); !errors.Is(err, ErrNameReserved) {
			t.Errorf("A's bind under B's wildcard: %v, want ErrNameReserved", err)
		}
		w.must(w.bind(b, "ts_b", "tn_b2", "n.bz.example.com"), "B's bind under its wildcard")

		// TCP addresses: a random port online for A is neither bound by B nor handed to B
		// as a reserved address; a reserved address is its holder's.
		w.must(w.bind(a, "ts_a", "tn_a9", "127.0.0.1:20005"), "A's random port")
		if err := w.bind(b, "ts_b", "tn_b3", "127.0.0.1:20005"); !errors.Is(err, ErrNameOnline) {
			t.Errorf("B's bind of A's online port: %v, want ErrNameOnline", err)
		}
		addr, err := w.reserveAddr(b)
		w.must(err, "B's reserved address")
		if err := w.bind(a, "ts_a", "tn_a10", addr); !errors.Is(err, ErrNameReserved) {
			t.Errorf("A's bind of B's reserved address: %v, want ErrNameReserved", err)
		}

		// Once the holder's tunnels are gone, the name is free, and then B's.
		for _, id := range []string{"tn_a1", "tn_a2"} {
			w.must(w.s.DeleteAgentTunnel(w.ctx, id, "ts_a", "conn_ts_a"), "delete "+id)
		}
		w.must(w.reserve(b, "svc-a.edgeplane.app"), "B's reservation of the freed name")
		if err := w.bind(a, "ts_a", "tn_a11", "svc-a.edgeplane.app"); !errors.Is(err, ErrNameReserved) {
			t.Errorf("A's bind once B reserved the name: %v, want ErrNameReserved", err)
		}
	})
}

// TestNameHoldsLapse: a name held by being online is held while the holding replica refreshes
// its row: once it has not for LiveTolerance (it died), another account may reserve or bind the
// name; a session of the same account taking over the name keeps it from others.
func TestNameHoldsLapse(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn)
		w.must(w.bind(w.a, "ts_a", "tn_a1", "lapse.edgeplane.app"), "A's bind")
		w.must(w.bind(w.a, "ts_a", "tn_a2", "lapse2.edgeplane.app"), "A's bind")
		w.wantOnline(w.reserve(w.b, "lapse.edgeplane.app"), "lapse.edgeplane.app")
		old := ep.FormatTime(time.Now().Add(-2 * LiveTolerance))
		w.must(w.s.inTx(w.ctx, func(ctx context.Context, tx *wtx) error {
			_, err := tx.ExecContext(ctx, w.s.d.rebind(`UPDATE agent_replicas SET seen_at = ? WHERE replica = ?`), old, "rep_a")
			return err
		}), "age replica A")
		w.must(w.reserve(w.b, "lapse.edgeplane.app"), "B's reservation once A's replica is dead")
		w.must(w.bind(w.b, "ts_b", "tn_b1", "lapse2.edgeplane.app"), "B's bind once A's replica is dead")
		// A's agent reconnects to another replica: B's reservation and bind hold.
		w.session(w.a, "ts_a2", "rep_c")
		if err := w.bind(w.a, "ts_a2", "tn_a3", "lapse.edgeplane.app"); !errors.Is(err, ErrNameReserved) {
			t.Errorf("A's rebind of a name B reserved: %v, want ErrNameReserved", err)
		}
		if err := w.bind(w.a, "ts_a2", "tn_a4", "lapse2.edgeplane.app"); !errors.Is(err, ErrNameOnline) {
			t.Errorf("A's rebind of a name B bound: %v, want ErrNameOnline", err)
		}
	})
}

// TestBindReserveRace: a bind through one replica and another account's reservation of the same
// name through another, started together, never both succeed: exactly one wins, for exact names
// and for a wildcard over the bound name. On PostgreSQL the two run at once; without the name
// locks both won in most rounds.
func TestBindReserveRace(t *testing.T) {
	eachEngine(t, func(t *testing.T, _, dsn string) {
		w := newHoldsWorld(t, dsn)
		other := openStore(t, dsn)
		wb := &holdsWorld{t: t, s: other, a: w.a, b: w.b, ctx: w.ctx}
		const rounds = 30
		for i := range rounds {
			name := fmt.Sprintf("race%d.edgeplane.app", i)
			reserved := name
			if i%2 == 1 { // a wildcard over the bound name
				name = fmt.Sprintf("app.race%d.edgeplane.app", i)
				reserved = fmt.Sprintf("*.race%d.edgeplane.app", i)
			}
			var bindErr, reserveErr error
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				bindErr = w.bind(w.a, "ts_a", fmt.Sprintf("tn_r%d", i), name)
			}()
			go func() {
				defer wg.Done()
				<-start
				reserveErr = wb.reserve(w.b, reserved)
			}()
			close(start)
			wg.Wait()
			switch {
			case bindErr == nil && reserveErr == nil:
				t.Fatalf("round %d: A's bind of %s and B's reservation of %s both succeeded", i, name, reserved)
			case bindErr == nil:
				w.wantOnline(reserveErr, reserved)
			case reserveErr == nil:
				if !errors.Is(bindErr, ErrNameReserved) {
					t.Fatalf("round %d: the bind lost with %v, want ErrNameReserved", i, bindErr)
				}
			default:
				t.Fatalf("round %d: both failed: %v; %v", i, bindErr, reserveErr)
			}
		}
	})
}
