package server_test

import (
	"fmt"
	"net/url"
	"testing"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/server"
)

// TestBackendChainRace: two concurrent PATCHes that together would close a cycle of three
// backends (f1 -> [f2] and f3 -> [f1], with f2 -> [f3] already stored) cannot both succeed, on
// every engine. Each cycle check reads a chain of backends that the other PATCH is changing; the
// checks must see each other. Every PATCH answers 200 or 400 ERR_NGROK_215 naming backends, and
// after every round the stored graph of the account has no cycle. Half of the rounds put a
// weighted backend in the chain.
func TestBackendChainRace(t *testing.T) {
	for _, engine := range testdb.Engines() {
		t.Run(engine, func(t *testing.T) {
			e := newEnvOn(t, engine, server.Config{})
			k := edgeKit{e, e.admin}
			s := k.backend()
			const rounds = 40
			cycles, both, refused := 0, 0, 0
			for round := range rounds {
				f1 := k.post("/backends/failover", map[string]any{"backends": []any{s}}).str("id")
				f3 := k.post("/backends/failover", map[string]any{"backends": []any{s}}).str("id")
				var f2 string
				if round%2 == 0 {
					f2 = k.post("/backends/failover", map[string]any{"backends": []any{f3}}).str("id")
				} else {
					f2 = k.post("/backends/weighted", map[string]any{"backends": map[string]any{f3: 1}}).str("id")
				}
				patches := [][2]string{{f1, f2}, {f3, f1}}
				var (
					statuses [2]int
					bodies   [2]map[string]any
					errs     [2]error
				)
				concurrently(len(patches), func(i int) {
					p := patches[i]
					statuses[i], bodies[i], errs[i] = k.try("PATCH", "/backends/failover/"+p[0], map[string]any{"backends": []any{p[1]}})
				})
				for i, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
					switch statuses[i] {
					case 200:
					case 400:
						refused++
						if bodies[i]["error_code"] != fmt.Sprintf("ERR_NGROK_%d", ep.CodeInvalid) || bodies[i]["status_code"] != 400.0 {
							t.Fatalf("round %d: PATCH %s: %v", round, patches[i][0], bodies[i])
						}
					default:
						t.Fatalf("round %d: PATCH %s answered %d: %v", round, patches[i][0], statuses[i], bodies[i])
					}
				}
				if statuses[0] == 200 && statuses[1] == 200 {
					both++
				}
				if cycle := backendCycle(t, e, k.a); cycle != nil {
					cycles++
					t.Logf("round %d: the stored backends form a cycle: %v (statuses %v)", round, cycle, statuses)
					// Break it, so that later rounds are judged on their own.
					e.do(k.a.token, "PATCH", "/backends/failover/"+f1, map[string]any{"backends": []any{s}}).must(t, 200)
				}
			}
			if cycles != 0 || both != 0 || refused != rounds {
				t.Fatalf("%d of %d rounds left a cycle, %d let both PATCHes succeed; %d PATCHes were refused (want one per round)",
					cycles, rounds, both, refused)
			}
		})
	}
}

// backendCycle reads every failover and weighted backend of the account, page by page, and
// returns a cycle of the graph they form, or nil when there is none.
func backendCycle(t *testing.T, e *env, a account) []string {
	t.Helper()
	children := map[string][]string{}
	for _, kind := range []string{"failover", "weighted"} {
		before := ""
		for {
			page := e.do(a.token, "GET", "/backends/"+kind+"?limit=100&before_id="+url.QueryEscape(before), nil).must(t, 200)
			items := page.items(t, "backends")
			for _, it := range items {
				id := it["id"].(string)
				switch bs := it["backends"].(type) {
				case []any:
					for _, c := range bs {
						children[id] = append(children[id], c.(string))
					}
				case map[string]any:
					for c := range bs {
						children[id] = append(children[id], c)
					}
				}
				before = id
			}
			if page.body["next_page_uri"] == nil || len(items) == 0 {
				break
			}
		}
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(id string) []string
	visit = func(id string) []string {
		switch state[id] {
		case onPath:
			for i, p := range path {
				if p == id {
					return append(append([]string{}, path[i:]...), id)
				}
			}
		case done:
			return nil
		}
		state[id] = onPath
		path = append(path, id)
		for _, c := range children[id] {
			if cyc := visit(c); cyc != nil {
				return cyc
			}
		}
		path = path[:len(path)-1]
		state[id] = done
		return nil
	}
	for id := range children {
		if cyc := visit(id); cyc != nil {
			return cyc
		}
	}
	return nil
}
