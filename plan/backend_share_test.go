package plan

import (
	"fmt"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// reachable counts the distinct backends reachable from b.
func reachable(b *Backend, seen map[*Backend]bool) int {
	if b == nil || seen[b] {
		return 0
	}
	seen[b] = true
	n := 1
	for _, c := range b.Children {
		n += reachable(c, seen)
	}
	return n
}

// TestBackendsResolvedOnce: a backend reached by several paths is resolved once and shared. An
// account of 4 layers of 32 failover backends, each listing the 32 of the layer below (the API
// refuses cycles, not shared children), over 32 static backends, made a tree of every path for
// each route referring to the top: 32^4, over a million backends per route. Now each backend is
// resolved once per depth it is reached at.
func TestBackendsResolvedOnce(t *testing.T) {
	const width, layers = ep.MaxChildBackends, 4
	s := &Snapshot{Account: "acct_dag", Backends: map[string]ep.Document{}}
	below := make([]string, width)
	for i := range below {
		below[i] = fmt.Sprintf("bkdsb_%02d", i)
		s.Backends[below[i]] = &ep.StaticBackend{Meta: ep.Meta{ID: below[i]}, Address: "127.0.0.1:1"}
	}
	for l := range layers {
		layer := make([]string, width)
		for i := range layer {
			layer[i] = fmt.Sprintf("bkdfo_%d_%02d", l, i)
			s.Backends[layer[i]] = &ep.FailoverBackend{Meta: ep.Meta{ID: layer[i]}, Backends: below}
		}
		below = layer
	}
	top := &ep.EndpointBackend{Enabled: true, Backend: &ep.Ref{ID: below[0]}}
	for i := range 8 {
		s.TCPEdges = append(s.TCPEdges, &ep.TCPEdge{Edge: ep.Edge{Meta: ep.Meta{ID: fmt.Sprintf("edgtcp_%d", i)}}, Backend: top})
	}
	a := testLive.Build(s, nil)
	seen := map[*Backend]bool{}
	n := 0
	for _, e := range a.TCP {
		n += reachable(e.Backend, seen)
	}
	if max := 1 + width*layers; n != max {
		t.Errorf("the plan holds %d backends for %d edges; want %d, one per backend and depth", n, len(a.TCP), max)
	}
	leaf := a.TCP[0].Backend
	for range layers {
		if leaf.Kind != Failover || len(leaf.Children) != width {
			t.Fatalf("%s: kind %d with %d children", leaf.ID, leaf.Kind, len(leaf.Children))
		}
		leaf = leaf.Children[width-1]
	}
	if leaf.Kind != Static || leaf.Address != "127.0.0.1:1" {
		t.Errorf("the bottom: %+v", leaf)
	}
}
