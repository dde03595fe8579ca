package server_test

import (
	"fmt"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
)

// TestExactReservationBeatsWildcard: account A reserves *.w.example.com; account B may reserve a
// name under it exactly, and then the name is B's: A's edges cannot take it (400 7116) and B's
// can. While an edge of A serves the name through the wildcard, B's reservation is refused (409
// ERR_NGROK_414, naming the hostport but not A's edge) and A's edge keeps it. On every engine.
func TestExactReservationBeatsWildcard(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			e := newEnvOn(t, engine, server.Config{})
			a, b := e.admin, e.newAccount("b")
			e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": "*.w.example.com"}).must(t, 201)
			edge := e.do(a.token, "POST", "/edges/https", hostports("app.w.example.com:443")).must(t, 201).str("id")

			// A's edge serves the name: B cannot reserve it, and nothing changes for either.
			r := e.do(b.token, "POST", "/reserved_domains", map[string]any{"domain": "app.w.example.com"}).wantError(t, 409, ep.CodeDomainReservedElsewhere)
			wantErrField(t, r, "domain")
			if msg := r.msg(); !strings.Contains(msg, "app.w.example.com:443") || !strings.Contains(msg, "*.w.example.com") || strings.Contains(msg, edge) {
				t.Fatalf("the refusal should name the hostport and the wildcard, never A's edge: %s", msg)
			}
			if got := e.do(b.token, "GET", "/reserved_domains", nil).must(t, 200).items(t, "reserved_domains"); len(got) != 0 {
				t.Fatalf("B holds reservations after the refusal: %v", got)
			}
			sameJSON(t, "A's edge", e.do(a.token, "GET", "/edges/https/"+edge, nil).must(t, 200).body["hostports"], []any{"app.w.example.com:443"})
			wantErrField(t, e.do(b.token, "POST", "/edges/https", hostports("app.w.example.com:443")).wantError(t, 400, ep.CodeHostNotReserved), "hostports[0]")

			// A itself may reserve a name its own edge serves.
			e.do(a.token, "POST", "/edges/https", hostports("own.w.example.com:443")).must(t, 201)
			e.do(a.token, "POST", "/reserved_domains", map[string]any{"domain": "own.w.example.com"}).must(t, 201)

			// Once A's edge lets the name go, B reserves it, and it is B's.
			e.do(a.token, "PATCH", "/edges/https/"+edge, hostports("other.w.example.com:443")).must(t, 200)
			dom := e.do(b.token, "POST", "/reserved_domains", map[string]any{"domain": "app.w.example.com"}).must(t, 201).str("id")
			bEdge := e.do(b.token, "POST", "/edges/https", hostports("app.w.example.com:443")).must(t, 201).str("id")
			wantErrField(t, e.do(a.token, "PATCH", "/edges/https/"+edge, hostports("other.w.example.com:443", "app.w.example.com:443")).
				wantError(t, 400, ep.CodeHostNotReserved), "hostports[1]")
			wantErrField(t, e.do(a.token, "POST", "/edges/tls", hostports("app.w.example.com:443")).wantError(t, 400, ep.CodeHostNotReserved), "hostports[0]")
			// The rest of the wildcard is still A's.
			e.do(a.token, "POST", "/edges/tls", hostports("more.w.example.com:443")).must(t, 201)
			e.do(b.token, "POST", "/edges/https", hostports("more2.w.example.com:443")).wantError(t, 400, ep.CodeHostNotReserved)

			// When B gives the name up, A's wildcard covers it again.
			e.do(b.token, "DELETE", "/edges/https/"+bEdge, nil).must(t, 204)
			e.do(b.token, "DELETE", "/reserved_domains/"+dom, nil).must(t, 204)
			e.do(a.token, "PATCH", "/edges/https/"+edge, hostports("app.w.example.com:443")).must(t, 200)
		})
	}
}

// TestExactReservationRacesWildcardEdge: A creating an edge on a name under its wildcard and B
// reserving the same name at the same moment: exactly one wins, on every engine. Either A's edge
// serves the name and B's reservation is refused (409 414), or B holds the name and A's edge is
// refused (400 7116) while B's own edge can take it.
func TestExactReservationRacesWildcardEdge(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			e := newEnvOn(t, engine, server.Config{})
			a, b := edgeKit{e, e.admin}, edgeKit{e, e.newAccount("b")}
			a.post("/reserved_domains", map[string]any{"domain": "*.race.example.com"})
			const rounds = 30
			edgeWins, reservationWins := 0, 0
			for round := range rounds {
				name := fmt.Sprintf("n%d.race.example.com", round)
				var (
					statuses [2]int
					bodies   [2]map[string]any
					errs     [2]error
				)
				concurrently(2, func(i int) {
					if i == 0 {
						statuses[i], bodies[i], errs[i] = a.try("POST", "/edges/https", hostports(name+":443"))
					} else {
						statuses[i], bodies[i], errs[i] = b.try("POST", "/reserved_domains", map[string]any{"domain": name})
					}
				})
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				code := func(i int) any { return bodies[i]["error_code"] }
				switch {
				case statuses == [2]int{201, 409} && code(1) == fmt.Sprintf("ERR_NGROK_%d", ep.CodeDomainReservedElsewhere):
					edgeWins++
				case statuses == [2]int{400, 201} && code(0) == fmt.Sprintf("ERR_NGROK_%d", ep.CodeHostNotReserved):
					reservationWins++
					b.post("/edges/https", hostports(name+":443"))
				default:
					t.Errorf("round %d: edge %d %v, reservation %d %v", round, statuses[0], bodies[0], statuses[1], bodies[1])
				}
			}
			t.Logf("%s: the edge won %d rounds, the reservation %d", engine, edgeWins, reservationWins)
		})
	}
}
