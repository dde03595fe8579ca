package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// bigEdge is an HTTPS edge of n routes of about size bytes each, whose strings hold what JSON
// escapes (with and without HTML escaping).
func bigEdge(n, size int) *ep.HTTPSEdge {
	e := &ep.HTTPSEdge{}
	e.ID, e.URI, e.Description = "edghts_1", "http://x/edges/https/edghts_1", `<edge> & "it's" é`
	var routes []ep.Document
	for i := range n {
		r := &ep.HTTPSEdgeRoute{EdgeID: e.ID, MatchType: "path_prefix", Match: fmt.Sprintf("/%04d<&>", i)}
		r.ID = fmt.Sprintf("edghtsrt_%d", i)
		r.Description = "<b>" + strings.Repeat("r", size) + "</b>\u2028"
		routes = append(routes, r)
	}
	e.SetChildren(routes)
	return e
}

// whole is the rendering of doc in one piece: json.Marshal, or an Encoder without HTML escaping
// and without its newline.
func whole(t *testing.T, doc any, html bool) []byte {
	t.Helper()
	if html {
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

// TestAddDocSameBytes checks that a document rendered piece by piece is the same bytes as
// rendered whole: an edge with routes, one without, a document that embeds nothing, and an edge
// given a key its shell does not end with (rendered whole, its routes kept).
func TestAddDocSameBytes(t *testing.T) {
	key := []byte(`"routes"`)
	for _, html := range []bool{true, false} {
		for _, n := range []int{0, 1, 3} {
			want := whole(t, bigEdge(n, 100), html)
			var body parts
			body.add([]byte("["))
			got, err := addDoc(&body, bigEdge(n, 100), key, html)
			if err != nil {
				t.Fatal(err)
			}
			if got != len(want) || !bytes.Equal(body.bytes(), append([]byte("["), want...)) {
				t.Errorf("html %v, %d routes: added %d bytes\n%s\nwant %d bytes\n%s", html, n, got, body.bytes(), len(want), want)
			}
		}
		route := bigEdge(1, 10).Routes[0]
		var body parts
		if _, err := addDoc(&body, route, nil, html); err != nil {
			t.Fatal(err)
		}
		if want := whole(t, route, html); !bytes.Equal(body.bytes(), want) {
			t.Errorf("html %v, a route: %s, want %s", html, body.bytes(), want)
		}
		edge := bigEdge(2, 10)
		want := whole(t, edge, html)
		body = parts{}
		if _, err := addDoc(&body, edge, []byte(`"nothing"`), html); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body.bytes(), want) || len(edge.Routes) != 2 {
			t.Errorf("html %v, an edge under another key: %d routes left, %s, want %s", html, len(edge.Routes), body.bytes(), want)
		}
	}
}

// TestAddDocAllocations checks that an edge at its largest (64 routes of 120 KiB) is rendered
// with about its own size allocated: in one piece the encoder's buffer grows by doubling and is
// then copied out, three times the body.
func TestAddDocAllocations(t *testing.T) {
	key := []byte(`"routes"`)
	for _, html := range []bool{true, false} {
		edge := bigEdge(ep.MaxRoutesPerEdge, 120<<10)
		var body parts
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := addDoc(&body, edge, key, html); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("html %v: a body of %d bytes allocated %d bytes (%.2f times)", html, body.size, allocated, float64(allocated)/float64(body.size))
		if allocated > uint64(body.size)*3/2 {
			t.Errorf("html %v: a body of %d bytes allocated %d bytes, over 1.5 times", html, body.size, allocated)
		}
	}
}
