package server_test

import (
	"net/url"
	"strings"
	"testing"

	ep "github.com/edgeplane/edgeplane"
)

// TestPagingRefusesForeignCursor: a before_id (or beforeId) that is not an id of the listed
// collection — garbage, a truncated id, an id of another collection, a prefix without its KSUID
// — is 400 ERR_NGROK_215 naming the parameter as the client spelled it, on every collection; it
// used to answer 200 with a page that started at the wrong place. An empty cursor still means the
// first page, and a well-formed id of the collection that no object has is still a cursor.
func TestPagingRefusesForeignCursor(t *testing.T) {
	forEachFixture(t, newEnv(t), func(t *testing.T, e *env, res *ep.Resource, fx fixture) {
		a := e.newAccount("cursor-" + res.Kind)
		path := collectionPath(e, a, res, fx)
		id := e.do(a.token, "POST", path, fx.create(e, a)).must(t, 201).str("id")
		other := "ipp"
		if res.Prefix == other {
			other = "ipr"
		}
		foreign, _ := ep.NewID(other)
		for _, bad := range []string{"x", "0", id[:len(id)-1], id + "0", res.Prefix + "_", res.Prefix,
			foreign, other + id[len(res.Prefix):], strings.ToUpper(id), " " + id, "null"} {
			for _, param := range []string{"before_id", "beforeId"} {
				r := e.do(a.token, "GET", path+"?limit=2&"+param+"="+url.QueryEscape(bad), nil).wantError(t, 400, ep.CodeInvalid)
				if f := r.body["details"].(map[string]any)["field"]; f != param {
					t.Fatalf("%s=%q: details.field = %v, want %s: %s", param, bad, f, param, r.raw)
				}
				if !strings.HasPrefix(r.msg(), param+": ") {
					t.Fatalf("%s=%q: message does not name the parameter: %s", param, bad, r.msg())
				}
			}
		}
		// An empty cursor is the first page; the newest object is on it.
		for _, q := range []string{"before_id=", "beforeId=", "before_id=&beforeId="} {
			items := e.do(a.token, "GET", path+"?"+q, nil).must(t, 200).items(t, res.ListKey)
			if len(items) == 0 || items[0]["id"] != id {
				t.Fatalf("%s: first page %v, want %s first", q, items, id)
			}
		}
		// An id of the collection is a cursor whether or not an object has it: the smallest
		// possible one is below every id (an empty page), a fresh one above (the whole list).
		zero := res.Prefix + "_" + strings.Repeat("0", 27)
		if items := e.do(a.token, "GET", path+"?before_id="+zero, nil).must(t, 200).items(t, res.ListKey); len(items) != 0 {
			t.Fatalf("before_id=%s: %d items, want none", zero, len(items))
		}
		fresh, _ := ep.NewID(res.Prefix)
		if items := e.do(a.token, "GET", path+"?beforeId="+fresh, nil).must(t, 200).items(t, res.ListKey); len(items) == 0 || items[0]["id"] != id {
			t.Fatalf("beforeId=%s (newer than every object): %v, want %s first", fresh, items, id)
		}
	})
}

// A long garbage cursor is named in the message, shortened.
func TestPagingCursorMessageIsShort(t *testing.T) {
	e := newEnv(t)
	r := e.do(e.admin.token, "GET", "/ip_policies?before_id="+strings.Repeat("9", 3000), nil).wantError(t, 400, ep.CodeInvalid)
	if len(r.msg()) > 200 || !strings.Contains(r.msg(), "999") {
		t.Fatalf("message of %d bytes: %.300s", len(r.msg()), r.msg())
	}
}
