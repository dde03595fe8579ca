package server_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/server"
)

// The randomized HTTP test: tens of thousands of hostile requests against a live server (real
// HTTP, real database). Run it longer, or send a run's requests again (from the seed it printed;
// the interleaving of the 8 clients differs), with
//
//	go test -run TestHostileRequests ./server -hostile.requests=200000 -hostile.seed=12345
var (
	hostileRequests = flag.Int("hostile.requests", 20000, "requests of TestHostileRequests")
	hostileSeed     = flag.Uint64("hostile.seed", 0, "seed of TestHostileRequests (0: a new one, printed)")
)

// TestHostileRequests sends random methods, paths (the real route patterns with ids of the
// account, of another account, missing, of the wrong kind or garbage, and paths that are not
// routes at all), headers (missing, malformed or unknown credentials and version headers, odd
// content types, CORS) and bodies (valid fixture bodies and their mutations: truncated JSON,
// deep nesting, huge numbers, invalid UTF-8, wrong types, unknown fields, wrong shapes, bodies
// over the 1 MiB limit) from several clients at once, and asserts:
//
//   - no response is a 5xx (a panic would be a 500: the server recovers them);
//   - every error has the standard error body (error_code, status_code equal to the status, msg,
//     details with the operation id of the Ngrok-Operation-Id header), a 405 an Allow header;
//   - nothing succeeds without valid credentials and version, and nothing on another account's
//     ids or on ids that name no object;
//   - the server is healthy afterwards;
//   - no object of either account changed except those written by requests that succeeded.
//
// So that it cannot pass vacuously, it also asserts that many requests were refused with each of
// several distinct error codes and that valid requests were included and succeeded.
func TestHostileRequests(t *testing.T) {
	seed := *hostileSeed
	if s := os.Getenv("EDGEPLANE_HOSTILE_SEED"); s != "" && seed == 0 {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d: replay with go test -run TestHostileRequests ./server -hostile.seed=%d", seed, seed)

	e := newEnvConfig(t, server.Config{CORSOrigins: []string{"*"}})
	a, b := e.newAccount("hostile-a"), e.newAccount("hostile-b")
	populate(t, e, a)
	populate(t, e, b)
	e.t = t
	g := newHostileGen(t, e, a)
	// Valid requests use the objects made so far; a second set is there for random DELETEs, so
	// that the valid requests keep finding what they name however long the test runs.
	protected := snapshot(t, e, a)
	populate(t, e, a)
	beforeA, beforeB := snapshot(t, e, a), snapshot(t, e, b)
	g.setObjects(beforeA, beforeB, protected)

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	st := &hostileStats{codes: map[string]int{}, statuses: map[int]int{}}
	const workers = 8
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := w; i < *hostileRequests; i += workers {
				st.record(g.check(client, g.next(rng)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	if len(st.failures) > 0 {
		sort.Strings(st.failures)
		n := min(len(st.failures), 20)
		t.Errorf("seed %d: %d of %d requests broke a rule; the first %d:\n%s", seed, len(st.failures), *hostileRequests, n,
			strings.Join(st.failures[:n], "\n\n"))
	}

	// Still healthy.
	e.doHeaders(nil, "GET", "/healthz", nil).must(t, 200)
	e.do(a.token, "GET", "/ip_policies", nil).must(t, 200)

	// Not vacuous: many refusals of several kinds, and valid requests that succeeded.
	t.Logf("%d requests in %v: statuses %v; error codes %v; %d valid requests of which %d succeeded; %d writes succeeded; %d transport errors on oversized bodies",
		*hostileRequests, elapsed.Round(time.Millisecond), st.statuses, st.codes, st.valid, st.validOK, len(st.writes), st.bigBodyErrors)
	scale := float64(*hostileRequests) / 20000
	for _, c := range []struct {
		code int
		min  float64
	}{{ep.CodeNotFound, 500}, {ep.CodeMethodNotAllowed, 300}, {ep.CodeBadJSON, 500}, {ep.CodeUnknownField, 200},
		{ep.CodeInvalid, 500}, {ep.CodeAuthMissing, 100}, {ep.CodeAuthMalformed, 100}, {ep.CodeAuthUnknown, 50},
		{ep.CodeNoVersion, 50}, {ep.CodeBadVersion, 50}, {ep.CodeBadLimit, 20}, {ep.CodeBodyTooLarge, 5}} {
		if got := st.codes[fmt.Sprintf("ERR_NGROK_%d", c.code)]; float64(got) < c.min*scale {
			t.Errorf("only %d responses with ERR_NGROK_%d, want at least %.0f: the generator no longer reaches that refusal", got, c.code, c.min*scale)
		}
	}
	if float64(st.validOK) < 400*scale || st.validOK*10 < st.valid*7 {
		t.Errorf("%d of %d valid requests succeeded: too few to show the server kept working", st.validOK, st.valid)
	}
	if float64(st.statuses[200]+st.statuses[201]+st.statuses[204]) < 500*scale {
		t.Errorf("only %d successful responses", st.statuses[200]+st.statuses[201]+st.statuses[204])
	}

	// No object changed but by a request that succeeded.
	compareAfter(t, "A", beforeA, snapshot(t, e, a), st.writes)
	compareAfter(t, "B", beforeB, snapshot(t, e, b), nil)
	e.do(a.token, "POST", "/ip_policies", map[string]any{"description": "after"}).must(t, 201)
}

// hostileReq is one generated request and what the test knows about it.
type hostileReq struct {
	method, path, query string
	header              http.Header
	body                []byte
	big                 bool // the body is over the limit
	authOK              bool // credentials and version are valid
	valid               bool // a well-formed request that should succeed
	target              string
	// target is the path of the object of account A the request addresses ("" when it
	// addresses none); parent is the path of its parent object (an edge, for a route).
	parent   string
	otherIDs bool // the path names an object of account B
	noObject bool // the path names ids that belong to no object (missing, wrong kind, garbage)
	kind     string
}

func (r *hostileReq) String() string {
	body := string(r.body)
	if len(body) > 300 {
		body = body[:300] + fmt.Sprintf("…(%d bytes)", len(r.body))
	}
	var hs []string
	for k, v := range r.header {
		hs = append(hs, k+": "+strings.Join(v, ","))
	}
	sort.Strings(hs)
	q := ""
	if r.query != "" {
		q = "?" + r.query
	}
	return fmt.Sprintf("%s %s%s [%s] (%s) %q", r.method, r.path, q, strings.Join(hs, "; "), r.kind, body)
}

// write is a request that succeeded in changing something.
type write struct {
	method, target, parent, created string
}

type hostileStats struct {
	mu                            sync.Mutex
	codes                         map[string]int
	statuses                      map[int]int
	valid, validOK, bigBodyErrors int
	writes                        []write
	failures                      []string
}

type outcome struct {
	req     *hostileReq
	status  int
	code    string
	failure string
	write   *write
	bigErr  bool
}

func (s *hostileStats) record(o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.failure != "" {
		s.failures = append(s.failures, o.failure+"\n  request: "+o.req.String())
	}
	if o.bigErr {
		s.bigBodyErrors++
		return
	}
	s.statuses[o.status]++
	if o.code != "" {
		s.codes[o.code]++
	}
	if o.req.valid {
		s.valid++
		if o.status >= 200 && o.status < 300 {
			s.validOK++
		}
	}
	if o.write != nil {
		s.writes = append(s.writes, *o.write)
	}
}

// hostileGen makes requests. It is read-only once built, so workers share it.
type hostileGen struct {
	t        *testing.T
	e        *env
	token    string
	ops      []apiOp
	create   map[*ep.Resource][]byte // valid create bodies in account A
	update   map[*ep.Resource][]byte
	modules  map[string][]byte // by "<parent kind>/<module>"
	objsA    map[*ep.Resource][]object
	objsB    map[*ep.Resource][]object
	allA     []object
	kept     []object                  // objects of A no random request deletes
	doomed   map[*ep.Resource][]object // objects of A random DELETEs may delete
	badAuth  []string
	bodyPool [][]byte // every valid body, for bodies sent to the wrong route
}

func newHostileGen(t *testing.T, e *env, a account) *hostileGen {
	g := &hostileGen{t: t, e: e, token: a.token, ops: storedOps(t, e), create: map[*ep.Resource][]byte{},
		update: map[*ep.Resource][]byte{}, modules: map[string][]byte{}}
	js := func(v any) []byte {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, res := range ep.Resources {
		fx := fixtures[res.Kind]
		g.create[res] = js(fx.create(e, a))
		g.update[res] = js(fx.update)
		g.bodyPool = append(g.bodyPool, g.create[res], g.update[res])
	}
	for key, fx := range moduleFixtures {
		g.modules[key] = js(edgeKit{e, a}.expand(fx))
		g.bodyPool = append(g.bodyPool, g.modules[key])
	}
	sort.Slice(g.bodyPool, func(i, j int) bool { return string(g.bodyPool[i]) < string(g.bodyPool[j]) })
	// Credentials that must never authenticate: the right shape with a wrong secret, an API key
	// id instead of a token, other schemes, garbage.
	sel, secret, _ := strings.Cut(a.token, "_")
	wrong := []byte(secret)
	wrong[0] = 'A' + (wrong[0]-'A'+1)%26
	keyID := "ak_" + sel
	g.badAuth = []string{"", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "bearer" + a.token, "Token " + a.token,
		"Bearer " + sel + "_" + string(wrong), "Bearer " + keyID, "Bearer " + a.token + "x", "Bearer " + strings.ToLower(a.token),
		"Bearer " + sel, "Bearer " + strings.Repeat("A", 4000), "Bearer \u00ff\u00fe", "Bearer " + a.token + " " + a.token}
	return g
}

func (g *hostileGen) setObjects(a, b, protected map[string]object) {
	g.objsA, g.objsB, g.doomed = map[*ep.Resource][]object{}, map[*ep.Resource][]object{}, map[*ep.Resource][]object{}
	sel, _, _ := strings.Cut(g.token, "_")
	for _, o := range sortedObjects(a) {
		if o.id == "ak_"+sel {
			continue // the key the requests authenticate with: deleting it would end the test
		}
		g.objsA[o.res] = append(g.objsA[o.res], o)
		g.allA = append(g.allA, o)
		if _, ok := protected[o.path]; ok {
			g.kept = append(g.kept, o)
		} else {
			g.doomed[o.res] = append(g.doomed[o.res], o)
		}
	}
	for _, o := range sortedObjects(b) {
		g.objsB[o.res] = append(g.objsB[o.res], o)
	}
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

var (
	oddMethods   = []string{"HEAD", "OPTIONS", "TRACE", "PROPFIND", "get", "Post", "M-SEARCH", "PURGE", "PATCH", "PUT", "DELETE", "POST", "GET"}
	contentTypes = []string{"application/json", "application/json", "", "text/plain", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/json; charset=utf-16", "application/xml", "*/*", "application/json;;;"}
	badVersions = []string{"", "1", "3", "2.0", " 2 x", "two", "22", "-2", "2,2", "\u00b2"}
	garbagePath = []string{"/", "/nope", "/ip_policies/", "/ip_policies/x/y", "/edges", "/edges/", "/edges/https/x/routes/y/z",
		"/backends", "/api_keys/../ip_policies", "/%2e%2e/ip_policies", "/ip_policies%2F", "/IP_POLICIES", "/healthz/x",
		"/openapi.json/x", "/metrics/x", "/ip_policies;x=1", "/" + strings.Repeat("a/", 1000), "/edges/tls/%00",
		"/credentials/%F0%9F%98%80", "/reserved_domains/rd_3MPvW0lhhsKGYY3Wa2DA32KAzhn/certificate/x", "/readyz/"}
	garbageIDs = []string{"x", "0", "-1", "null", "%20", "%00", "%2e%2e", "..", "ipp_", "rd_000000000000000000000000000",
		"ak_zzzzzzzzzzzzzzzzzzzzzzzzzzz", strings.Repeat("z", 3000), "%F0%9F%98%80", "%FF", "id%2Fwith%2Fslashes", "{id}", "*"}
	queries = []string{"limit=0", "limit=101", "limit=-5", "limit=abc", "limit=1e2", "limit=%FF", "limit=1&limit=500",
		"before_id=x", "before_id=%00", "beforeId=" + strings.Repeat("9", 500), "limit=2&before_id=", "limit=99999999999999999999",
		"limit=1", "limit=100&before_id=ipp_3MPvW0lhhsKGYY3Wa2DA32KAzhn", "%zz", "a=b&&&", "limit"}
)

// next makes one request.
func (g *hostileGen) next(rng *rand.Rand) *hostileReq {
	r := &hostileReq{header: http.Header{}}
	roll := rng.IntN(100)
	switch {
	case roll < 8:
		g.validRequest(rng, r)
		return r
	case roll < 13:
		r.kind, r.method, r.path = "garbage path", pick(rng, oddMethods), pick(rng, garbagePath)
		// A path with dot segments is the collection it resolves to (the router cleans paths),
		// where a create may succeed; no other garbage path names anything.
		r.noObject = !strings.Contains(r.path, "/../")
	default:
		g.routeRequest(rng, r)
	}
	g.headers(rng, r)
	if r.method == "POST" || r.method == "PATCH" || r.method == "PUT" || rng.IntN(10) == 0 {
		g.mutatedBody(rng, r)
	}
	if rng.IntN(5) == 0 {
		r.query = pick(rng, queries)
	}
	return r
}

// validRequest is a request that should succeed: a GET, a list, a PATCH with the fixture update
// or a module PUT with its fixture, on an object of account A.
func (g *hostileGen) validRequest(rng *rand.Rand, r *hostileReq) {
	r.valid, r.authOK, r.kind = true, true, "valid"
	r.header.Set("Authorization", "Bearer "+g.token)
	r.header.Set("Ngrok-Version", "2")
	r.header.Set("Content-Type", "application/json")
	o := pick(rng, g.kept)
	r.target, r.parent = o.path, parentPath(o)
	switch rng.IntN(4) {
	case 0:
		r.method, r.path = "GET", o.path
	case 1:
		r.method, r.path = "GET", strings.TrimSuffix(o.path, "/"+o.id)
		r.target, r.parent = "", ""
		if rng.IntN(2) == 0 {
			r.query = "limit=" + strconv.Itoa(1+rng.IntN(100))
		}
	case 2:
		r.method, r.path, r.body = "PATCH", o.path, g.update[o.res]
	default:
		var mods []*ep.Module
		for _, m := range ep.ModulesOf(o.res) {
			if m.Ops.Has(ep.OpUpdate) && m.Name != "oauth" && m.Name != "saml" && m.Name != "oidc" {
				mods = append(mods, m)
			}
		}
		if len(mods) == 0 {
			r.method, r.path = "GET", o.path
			return
		}
		m := pick(rng, mods)
		r.method, r.path, r.body = "PUT", o.path+"/"+m.Name, g.modules[o.res.Kind+"/"+m.Name]
	}
}

func parentPath(o object) string {
	if o.parent == "" {
		return ""
	}
	return strings.TrimSuffix(o.path, "/routes/"+o.id)
}

// routeRequest fills a route pattern with ids of some kind, under a method that is usually the
// route's own.
func (g *hostileGen) routeRequest(rng *rand.Rand, r *hostileReq) {
	op := pick(rng, g.ops)
	r.method = op.method
	if rng.IntN(7) == 0 {
		r.method = pick(rng, oddMethods)
	}
	r.path = op.pattern
	if !strings.Contains(op.pattern, "{") {
		r.kind = "collection"
		return
	}
	hasID := strings.Contains(op.pattern, "{id}")
	source := rng.IntN(100)
	candidates := g.objsA[op.res]
	if r.method == "DELETE" && op.module == "" {
		candidates = g.doomed[op.res] // only the second set of A's objects is ever deleted
		if len(candidates) == 0 && source < 45 {
			source = 70
		}
	}
	switch {
	case source < 45: // account A's own objects
		r.kind = "A's ids"
		if !hasID { // the routes of an edge
			edge := pick(rng, g.objsA[op.res.Parent])
			r.path, r.target = fill(op.pattern, edge.id, ""), edge.path
			return
		}
		o := pick(rng, candidates)
		r.path, r.target, r.parent = fill(op.pattern, o.parent, o.id), o.path, parentPath(o)
	case source < 65: // account B's objects
		r.kind, r.otherIDs = "B's ids", true
		if !hasID {
			r.path = fill(op.pattern, pick(rng, g.objsB[op.res.Parent]).id, "")
			return
		}
		o := pick(rng, g.objsB[op.res])
		r.path = fill(op.pattern, o.parent, o.id)
	case source < 80: // ids of the right prefix that exist nowhere
		r.kind, r.noObject = "missing ids", true
		edge, id := "", ""
		if op.res.Parent != nil {
			edge, _ = ep.NewID(op.res.Parent.Prefix)
		}
		id, _ = ep.NewID(op.res.Prefix)
		r.path = fill(op.pattern, edge, id)
	case source < 90: // ids of account A's objects of another collection
		r.kind, r.noObject = "wrong-kind ids", true
		var o object
		for o = pick(rng, g.allA); o.res == op.res || o.res == op.res.Parent; o = pick(rng, g.allA) {
		}
		r.path = fill(op.pattern, o.id, o.id)
	default:
		r.kind, r.noObject = "garbage ids", true
		r.path = fill(op.pattern, pick(rng, garbageIDs), pick(rng, garbageIDs))
	}
}

func (g *hostileGen) headers(rng *rand.Rand, r *hostileReq) {
	r.authOK = true
	if rng.IntN(4) == 0 {
		r.authOK = false
		if v := pick(rng, g.badAuth); v != "" {
			r.header.Set("Authorization", v)
		}
	} else {
		r.header.Set("Authorization", "Bearer "+g.token)
	}
	switch n := rng.IntN(100); {
	case n < 80:
		r.header.Set("Ngrok-Version", "2")
	case n < 87:
		r.header.Set("Service-Version", "2")
	default:
		r.authOK = false
		if v := pick(rng, badVersions); v != "" {
			r.header.Set(pick(rng, []string{"Ngrok-Version", "Service-Version"}), v)
		}
	}
	if ct := pick(rng, contentTypes); ct != "" {
		r.header.Set("Content-Type", ct)
	}
	if rng.IntN(10) == 0 {
		r.header.Set("Origin", pick(rng, []string{"https://app.example.com", "null", "http://evil.example"}))
		if r.method == "OPTIONS" || rng.IntN(2) == 0 {
			r.header.Set("Access-Control-Request-Method", pick(rng, []string{"PATCH", "DELETE", "FOO"}))
		}
	}
	if rng.IntN(20) == 0 {
		r.header.Set("X-Forwarded-For", "127.0.0.1, ::1, garbage")
		r.header.Set("Accept", "application/xml")
		r.header.Set("Accept-Encoding", "gzip, br, zstd")
		r.header.Set("X-Junk", strings.Repeat("j", 8000))
	}
}

// mutatedBody sends the body of the route (or of another route), usually damaged.
func (g *hostileGen) mutatedBody(rng *rand.Rand, r *hostileReq) {
	var base []byte
	if r.method == "POST" && r.target == "" && !r.otherIDs {
		if res, _ := resourceOfPattern(r.path); res != nil {
			base = g.create[res]
		}
	}
	if base == nil {
		base = pick(rng, g.bodyPool)
	}
	if res, module := resourceOfPattern(r.path); res != nil && rng.IntN(4) != 0 {
		switch {
		case module != "" && g.modules[res.Kind+"/"+module] != nil:
			base = g.modules[res.Kind+"/"+module]
		case r.method == "PATCH":
			base = g.update[res]
		case r.method == "POST":
			base = g.create[res]
		}
	}
	var doc map[string]any
	_ = json.Unmarshal(base, &doc)
	js := func(v any) []byte {
		data, _ := json.Marshal(v)
		return data
	}
	withField := func(v any) []byte {
		d := map[string]any{}
		for k, x := range doc {
			d[k] = x
		}
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) == 0 || rng.IntN(5) == 0 {
			d[pick(rng, []string{"description", "metadata", "enabled", "module", "id", "edge_id", "hostports", "acl", "cidr"})] = v
		} else {
			d[pick(rng, keys)] = v
		}
		return js(d)
	}
	switch n := rng.IntN(100); {
	case n < 12:
		r.body = base
	case n < 27: // a value of the wrong type
		r.body = withField(pick(rng, []any{42, -1, 0, 1.5, true, false, nil, "", "x", []any{}, []any{1, "a", nil},
			map[string]any{}, map[string]any{"a": map[string]any{"b": 1}}, json.Number("1e400"), json.Number("-1e400"),
			json.Number("123456789012345678901234567890"), json.Number("1e-400"), json.Number("-0"),
			strings.Repeat("x", 5000), "bind:*", "10.0.0.1/8", "ipp_" + strings.Repeat("0", 27)}))
	case n < 35: // an unknown field
		r.body = withField(1)
		d := map[string]any{}
		_ = json.Unmarshal(r.body, &d)
		d[pick(rng, []string{"no_such_field", "Description", "descriptionx", "", "__proto__", "uri", "created_at", "token"})] = "x"
		r.body = js(d)
	case n < 45: // truncated
		if len(base) > 1 {
			r.body = base[:rng.IntN(len(base))]
		}
	case n < 55: // random bytes changed, inserted or removed
		b := append([]byte(nil), base...)
		for range 1 + rng.IntN(5) {
			i := rng.IntN(len(b) + 1)
			switch rng.IntN(3) {
			case 0:
				if i < len(b) {
					b[i] = byte(rng.IntN(256))
				}
			case 1:
				b = append(b[:i], append([]byte{pick(rng, []byte(`{}[]",:0-e.\ ntf`))}, b[i:]...)...)
			default:
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			}
		}
		r.body = b
	case n < 60: // deep nesting
		depth := pick(rng, []int{100, 5000, 10001, 50000})
		open, closeB := "[", "]"
		if rng.IntN(2) == 0 {
			open, closeB = `{"a":`, "}"
		}
		r.body = []byte(`{"description": ` + strings.Repeat(open, depth) + "1" + strings.Repeat(closeB, depth) + `}`)
	case n < 65: // huge numbers
		num := pick(rng, []string{"1e400", "-1e400", "1" + strings.Repeat("0", 400), "9223372036854775808", "-9223372036854775809",
			"18446744073709551616", "4294967296", "1.0000000000000000000000001", "0.1e-400", "1E+99999"})
		r.body = withField(json.Number(num))
	case n < 70: // invalid UTF-8, inside strings and outside
		b := append([]byte(nil), base...)
		bad := pick(rng, [][]byte{{0xff}, {0xfe, 0xff}, {0xc3}, {0xed, 0xa0, 0x80}, {0xf4, 0x90, 0x80, 0x80}, {0}, []byte(`\ud800`), []byte(`\u0000`)})
		if i := bytes.IndexByte(b, '"'); i >= 0 && rng.IntN(2) == 0 {
			// into the first key or string
			b = append(b[:i+1], append(append([]byte(nil), bad...), b[i+1:]...)...)
		} else {
			i := rng.IntN(len(b) + 1)
			b = append(b[:i], append(append([]byte(nil), bad...), b[i:]...)...)
		}
		r.body = b
	case n < 75: // not an object
		r.body = []byte(pick(rng, []string{"[]", `"x"`, "1", "null", "true", "[{}]", `{"module": null}`, `{"module": []}`,
			`{"module": {}, "extra": 1}`, `{"module": "x"}`, "{} {}", "{}x", `{"a":1,"a":2}`, "\ufeff{}", " \n\t ", "{,}", "{\"\":1}"}))
	case n < 80: // an echoed id that is not the path's
		d := map[string]any{}
		_ = json.Unmarshal(base, &d)
		d[pick(rng, []string{"id", "edge_id"})] = pick(rng, []any{"ipp_" + strings.Repeat("1", 27), 5, "", nil, []any{}})
		r.body = js(d)
	case n < 84: // a module wrapped with ids, or sent to the wrong place
		r.body = js(map[string]any{"id": pick(rng, []any{nil, "", "x"}), "module": doc})
	case n < 85: // a body over the limit, of several kinds
		r.big = true
		size := pick(rng, []int{1<<20 + 1, 2 << 20})
		switch rng.IntN(3) {
		case 0:
			r.body = []byte(`{"description": "` + strings.Repeat("x", size) + `"}`)
		case 1:
			r.body = append([]byte("{}"), bytes.Repeat([]byte(" "), size)...)
		default:
			r.body = bytes.Repeat([]byte("["), size)
		}
	case n < 90: // long strings in every field
		d := map[string]any{}
		for k := range doc {
			d[k] = strings.Repeat("é", 3000)
		}
		r.body = js(d)
	default: // random bytes
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		r.body = b
	}
}

// check sends the request and checks the response against every rule.
func (g *hostileGen) check(client *http.Client, r *hostileReq) outcome {
	o := outcome{req: r}
	u := &url.URL{Scheme: "http", Host: strings.TrimPrefix(g.e.srv.URL, "http://"), Opaque: r.path, RawQuery: r.query}
	req, err := http.NewRequest(r.method, g.e.srv.URL, bytes.NewReader(r.body))
	if err != nil {
		o.failure = "the test made a request Go cannot send: " + err.Error()
		return o
	}
	req.URL = u
	req.Header = r.header
	if r.body == nil {
		req.Body, req.ContentLength = nil, 0
	}
	res, err := client.Do(req)
	if err != nil {
		if r.big {
			o.bigErr = true // the server may close the connection while a client still sends a body over the limit
			return o
		}
		o.failure = "transport error: " + err.Error()
		return o
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		o.failure = "reading the response: " + err.Error()
		return o
	}
	o.status = res.StatusCode
	fail := func(format string, args ...any) outcome {
		o.failure = fmt.Sprintf("status %d: ", res.StatusCode) + fmt.Sprintf(format, args...) + "\n  response: " + truncate(raw, 400)
		return o
	}
	switch {
	case res.StatusCode >= 500:
		return fail("a server error")
	case res.StatusCode >= 400:
		if r.method == "HEAD" {
			return o
		}
		code, problem := errorBodyProblem(res, raw)
		o.code = code
		if problem != "" {
			return fail("not the standard error body: %s", problem)
		}
		if res.StatusCode == 405 && res.Header.Get("Allow") == "" {
			return fail("405 without Allow")
		}
		// A valid request may still be refused when a random DELETE removed what it names.
		return o
	case res.StatusCode >= 300:
		return fail("a redirect")
	}
	// Success.
	if r.method == "OPTIONS" && res.StatusCode == 204 && r.header.Get("Origin") != "" {
		return o // a CORS preflight, answered without credentials by design
	}
	if !r.authOK {
		return fail("success without valid credentials and version")
	}
	if r.otherIDs {
		return fail("success on another account's object")
	}
	if r.noObject {
		return fail("success on a path that names no object")
	}
	if res.StatusCode == 204 {
		if len(raw) != 0 {
			return fail("204 with a body")
		}
	} else if r.method != "HEAD" {
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fail("a success whose body is not a JSON object: %v", err)
		}
	}
	switch strings.ToUpper(r.method) {
	case "POST":
		var v struct {
			ID  string `json:"id"`
			URI string `json:"uri"`
		}
		_ = json.Unmarshal(raw, &v)
		created, ok := strings.CutPrefix(v.URI, g.e.base)
		if v.ID == "" || !ok || !strings.HasSuffix(created, "/"+v.ID) {
			return fail("a create without an id and its uri")
		}
		o.write = &write{method: "POST", created: created, parent: r.target}
	case "PATCH", "PUT", "DELETE":
		if r.target == "" {
			return fail("a write succeeded on a path that names no object of the account")
		}
		o.write = &write{method: strings.ToUpper(r.method), target: r.target, parent: r.parent}
	}
	return o
}

// errorBodyProblem checks the standard error body and returns its error_code and what is wrong
// with it, if anything.
func errorBodyProblem(res *http.Response, raw []byte) (code, problem string) {
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		return "", "not a JSON object: " + err.Error()
	}
	code, _ = body["error_code"].(string)
	if !strings.HasPrefix(code, "ERR_NGROK_") {
		return code, "error_code " + fmt.Sprint(body["error_code"])
	}
	if sc, _ := body["status_code"].(float64); int(sc) != res.StatusCode {
		return code, fmt.Sprintf("status_code %v", body["status_code"])
	}
	if msg, _ := body["msg"].(string); msg == "" {
		return code, "no msg"
	}
	details, ok := body["details"].(map[string]any)
	if !ok {
		return code, "details is not an object"
	}
	for k, v := range details {
		if _, ok := v.(string); !ok {
			return code, "details." + k + " is not a string"
		}
	}
	if op, _ := details["operation_id"].(string); !ep.ValidID("op", op) || op != res.Header.Get("Ngrok-Operation-Id") {
		return code, "operation_id " + fmt.Sprint(details["operation_id"]) + " vs header " + res.Header.Get("Ngrok-Operation-Id")
	}
	if len(body) != 4 {
		return code, "keys other than error_code, status_code, msg and details"
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		return code, "Content-Type " + ct
	}
	return code, ""
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// compareAfter asserts that the only objects of the account that differ between the snapshots
// are those that requests which succeeded wrote: the object written and its parent (an edge
// shows its routes), objects created, and what a successful delete takes with it (the rules of an
// IP policy, the routes of an edge, the keys and credentials of a bot user).
func compareAfter(t *testing.T, name string, before, after map[string]object, writes []write) {
	t.Helper()
	allowed := map[string]bool{}
	var deleted []string
	for _, w := range writes {
		for _, p := range []string{w.target, w.parent, w.created} {
			if p != "" {
				allowed[p] = true
			}
		}
		if w.method == "DELETE" && w.target != "" {
			deleted = append(deleted, w.target)
		}
	}
	cascades := func(o object) bool {
		for _, d := range deleted {
			if strings.HasPrefix(o.path, d+"/") {
				return true
			}
			id := d[strings.LastIndex(d, "/")+1:]
			if ref, ok := o.doc["ip_policy"].(map[string]any); ok && ref["id"] == id {
				return true
			}
			if o.doc["owner_id"] == id {
				return true
			}
		}
		return false
	}
	var diffs []string
	for p, o := range before {
		n, ok := after[p]
		switch {
		case ok && n.raw == o.raw:
		case allowed[p] || cascades(o):
		case !ok:
			diffs = append(diffs, "deleted "+p)
		default:
			diffs = append(diffs, "changed "+p+"\n  before "+o.raw+"\n  after  "+n.raw)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok && !allowed[p] {
			diffs = append(diffs, "created "+p)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("account %s: objects changed that no successful request wrote:\n%s", name, strings.Join(diffs, "\n"))
	}
}
