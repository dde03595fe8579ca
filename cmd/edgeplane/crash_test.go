package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite" // to open the database file read-only for PRAGMA integrity_check
)

// The durability test. The short form (5 cycles) runs with every `go test`; the long form:
//
//	go test -run TestCrashDurability ./cmd/edgeplane -crash.cycles=50
//
// (or EDGEPLANE_CRASH_CYCLES=50). -crash.seed replays a run's kill moments and choices.
var (
	crashCycles = flag.Int("crash.cycles", 0, "SIGKILL cycles of TestCrashDurability (default 5, or EDGEPLANE_CRASH_CYCLES)")
	crashSeed   = flag.Uint64("crash.seed", 0, "seed of TestCrashDurability (0: a new one, printed)")
)

const crashWriters = 16

// TestCrashDurability runs `edgeplane serve` on a SQLite file while 16 writers create, PATCH and
// delete IP policies, credentials, reserved domains and TLS edges and PUT edge modules, kills the
// process with SIGKILL at a random moment, checks the file with PRAGMA integrity_check and
// foreign_key_check, restarts the server and checks, through the API:
//
//   - every write acknowledged (2xx) before the kill is there with the acknowledged content; a
//     write in flight at the kill (no answer) may or may not have landed, so an object with one
//     shows either the acknowledged state or exactly the state that write would have made;
//   - acknowledged deletes stay deleted; a create in flight left at most one object;
//   - nothing is half-written: every object of every list has all the fields of its kind, and
//     the fields one request wrote together are all old or all new.
func TestCrashDurability(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGKILL on Windows")
	}
	t.Parallel()
	cycles := *crashCycles
	if cycles == 0 {
		cycles, _ = strconv.Atoi(os.Getenv("EDGEPLANE_CRASH_CYCLES"))
	}
	if cycles <= 0 {
		cycles = 5
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("%d cycles, seed %d (replay with -crash.seed=%d)", cycles, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	db := filepath.Join(t.TempDir(), "edgeplane.db")
	p := startServer(t, db)
	token, ok := bootstrapToken(t, p.Stderr.String())
	if !ok {
		t.Fatalf("no bootstrap token; stderr:\n%s", p.Stderr)
	}
	m := &crashModel{t: t, token: token, client: &http.Client{Timeout: 10 * time.Second}}
	m.learnKeys(p)
	writers := make([]*crashWriter, crashWriters)
	for i := range writers {
		writers[i] = &crashWriter{m: m, id: i, rng: rand.New(rand.NewPCG(seed, uint64(i+1)))}
	}

	var acked, unanswered int
	for cycle := 1; cycle <= cycles; cycle++ {
		if cycle > 1 {
			p = startServer(t, db)
			m.verify(p, writers)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		for _, w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.run(p, cycle, &stop)
			}()
		}
		time.Sleep(time.Duration(150+rng.IntN(900)) * time.Millisecond)
		if err := p.Cmd.Process.Signal(os.Kill); err != nil {
			t.Fatalf("SIGKILL: %v", err)
		}
		<-p.Done
		stop.Store(true)
		wg.Wait()
		for _, w := range writers {
			acked += w.acked
			unanswered += w.unanswered
			w.acked, w.unanswered = 0, 0
		}
		checkSQLiteFile(t, db)
		if t.Failed() {
			return
		}
	}
	p = startServer(t, db)
	m.verify(p, writers)
	live := 0
	for _, w := range writers {
		live += len(w.objs)
	}
	t.Logf("%d cycles: %d writes acknowledged, %d in flight at a kill; %d objects checked at the end", cycles, acked, unanswered, live)
	if acked < 50*cycles || unanswered == 0 {
		t.Errorf("the writers did too little for the test to mean anything: %d acknowledged writes, %d in flight at kills", acked, unanswered)
	}
	if code := p.signal(os.Interrupt); code != 0 {
		t.Errorf("serve exited %d after SIGINT", code)
	}
	checkSQLiteFile(t, db)
}

// checkSQLiteFile opens the database read-only, as the crash left it, and requires
// PRAGMA integrity_check to say ok and PRAGMA foreign_key_check to find nothing.
func checkSQLiteFile(t *testing.T, path string) {
	t.Helper()
	conn, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := conn.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	var results []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		results = append(results, s)
	}
	rows.Close()
	if len(results) != 1 || results[0] != "ok" {
		t.Fatalf("PRAGMA integrity_check: %q", results)
	}
	fk, err := conn.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		t.Fatalf("foreign_key_check: %v", err)
	}
	defer fk.Close()
	cols, _ := fk.Columns()
	for fk.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		_ = fk.Scan(ptrs...)
		t.Errorf("PRAGMA foreign_key_check: %v", vals)
	}
}

// crashObj is what the test knows about one object a writer made.
type crashObj struct {
	kind   string // ip_policy, credential, reserved_domain, tls_edge
	marker string // the unique description given at creation
	path   string // "" until the create was answered (or the object found after a crash)
	// state holds the tracked fields as last acknowledged (or as verified after a crash);
	// pending, when not nil, what they are if the unanswered last write landed.
	state, pending map[string]any
	created        bool // the create was acknowledged or the object found
	deleted        bool // the delete was acknowledged
	deleting       bool // a delete is unanswered
	domain         *crashObj
}

// crashModel holds what the writers share: the token, the client, and the field set of each kind.
type crashModel struct {
	t      *testing.T
	token  string
	client *http.Client
	keys   map[string][]string // kind -> the sorted keys of its documents
}

var crashKinds = map[string]string{"ip_policy": "/ip_policies", "credential": "/credentials",
	"reserved_domain": "/reserved_domains", "tls_edge": "/edges/tls"}

var crashListKeys = map[string]string{"ip_policy": "ip_policies", "credential": "credentials",
	"reserved_domain": "reserved_domains", "tls_edge": "tls_edges"}

// project picks the tracked fields of a document of the kind.
func project(kind string, doc map[string]any) map[string]any {
	out := map[string]any{"description": doc["description"]}
	switch kind {
	case "ip_policy":
		out["metadata"] = doc["metadata"]
	case "credential":
		out["acl"] = doc["acl"]
	case "reserved_domain":
		out["domain"] = doc["domain"]
	case "tls_edge":
		out["hostports"] = doc["hostports"]
		out["tls_termination.min_version"] = moduleField(doc["tls_termination"], "min_version")
		out["traffic_policy.value"] = moduleField(doc["traffic_policy"], "value")
	}
	return out
}

func moduleField(m any, field string) any {
	if mm, ok := m.(map[string]any); ok {
		return mm[field]
	}
	return nil
}

func normalize(v any) map[string]any {
	data, _ := json.Marshal(v)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return out
}

func merged(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return normalize(out)
}

// errTransport is a request without an answer: the process was killed under it.
var errTransport = errors.New("no answer")

func (m *crashModel) do(p *proc, method, path string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, p.url(path), rd)
	if err != nil {
		m.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+m.token)
	req.Header.Set("Ngrok-Version", "2")
	req.Header.Set("Content-Type", "application/json")
	res, err := m.client.Do(req)
	if err != nil {
		return 0, nil, errTransport
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, errTransport
	}
	var doc map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &doc); err != nil {
			m.t.Errorf("%s %s: status %d with a body that is not a JSON object: %q", method, path, res.StatusCode, raw)
		}
	}
	if res.StatusCode >= 500 {
		m.t.Errorf("%s %s: status %d: %s", method, path, res.StatusCode, raw)
	}
	return res.StatusCode, doc, nil
}

// learnKeys records the fields of each kind from objects made before any crash.
func (m *crashModel) learnKeys(p *proc) {
	m.keys = map[string][]string{}
	domain := "keys-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".crash.example.com"
	bodies := []struct {
		kind string
		body any
	}{
		{"ip_policy", map[string]any{}},
		{"credential", map[string]any{"acl": []any{"bind:x.example.com"}}},
		{"reserved_domain", map[string]any{"domain": domain}},
		{"tls_edge", map[string]any{"hostports": []any{domain + ":443"}}},
	}
	for _, b := range bodies {
		status, doc, err := m.do(p, "POST", crashKinds[b.kind], b.body)
		if err != nil || status != 201 {
			m.t.Fatalf("create a %s: %d %v %v", b.kind, status, doc, err)
		}
		_, doc, _ = m.do(p, "GET", crashKinds[b.kind]+"/"+doc["id"].(string), nil)
		m.keys[b.kind] = sortedKeys(doc)
	}
}

func sortedKeys(doc map[string]any) []string {
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// crashWriter makes, changes and deletes its own objects, one request at a time.
type crashWriter struct {
	m                 *crashModel
	id                int
	rng               *rand.Rand
	objs              []*crashObj
	seq               int
	acked, unanswered int
}

func (w *crashWriter) marker(cycle int) string {
	w.seq++
	return fmt.Sprintf("w%d-c%d-%d", w.id, cycle, w.seq)
}

// live returns the objects a writer may change: created, not deleted, nothing unanswered.
func (w *crashWriter) live(kind string) []*crashObj {
	var out []*crashObj
	for _, o := range w.objs {
		if o.created && !o.deleted && !o.deleting && o.pending == nil && (kind == "" || o.kind == kind) {
			out = append(out, o)
		}
	}
	return out
}

// run writes until a request goes unanswered (the process was killed) or stop is set.
func (w *crashWriter) run(p *proc, cycle int, stop *atomic.Bool) {
	for !stop.Load() {
		if err := w.step(p, cycle); err != nil {
			w.unanswered++
			return
		}
	}
}

func (w *crashWriter) step(p *proc, cycle int) error {
	t := w.m.t
	n := len(w.live(""))
	roll := w.rng.IntN(100)
	if n > 24 && roll < 50 {
		roll = 95 // keep the population small so that each cycle can check all of it
	}
	switch {
	case roll < 15:
		mk := w.marker(cycle)
		return w.create(p, &crashObj{kind: "ip_policy", marker: mk}, map[string]any{"description": mk, "metadata": "m-" + mk})
	case roll < 27:
		mk := w.marker(cycle)
		return w.create(p, &crashObj{kind: "credential", marker: mk},
			map[string]any{"description": mk, "acl": []any{"bind:" + mk + ".example.com", "bind:edge=" + mk}})
	case roll < 37:
		var domain *crashObj
		for _, d := range w.live("reserved_domain") {
			if !w.hasEdge(d) {
				domain = d
				break
			}
		}
		if domain == nil {
			mk := w.marker(cycle)
			return w.create(p, &crashObj{kind: "reserved_domain", marker: mk},
				map[string]any{"description": mk, "domain": mk + ".crash.example.com"})
		}
		mk := w.marker(cycle)
		return w.create(p, &crashObj{kind: "tls_edge", marker: mk, domain: domain},
			map[string]any{"description": mk, "hostports": []any{domain.state["domain"].(string) + ":443"}})
	case roll < 70:
		objs := w.live("")
		if len(objs) == 0 {
			return nil
		}
		o := objs[w.rng.IntN(len(objs))]
		mk := w.marker(cycle)
		var body map[string]any
		switch o.kind {
		case "ip_policy":
			body = map[string]any{"description": mk, "metadata": "m-" + mk}
		case "credential":
			body = map[string]any{"description": mk, "acl": []any{"bind:*." + mk + ".example.com"}}
		default:
			body = map[string]any{"description": mk}
		}
		return w.update(p, o, "PATCH", o.path, body, body)
	case roll < 88:
		edges := w.live("tls_edge")
		if len(edges) == 0 {
			return nil
		}
		o := edges[w.rng.IntN(len(edges))]
		if w.rng.IntN(2) == 0 {
			v := []string{"1.0", "1.1", "1.2", "1.3"}[w.rng.IntN(4)]
			return w.update(p, o, "PUT", o.path+"/tls_termination", map[string]any{"terminate_at": "edge", "min_version": v},
				map[string]any{"tls_termination.min_version": v})
		}
		v := `{"on_tcp_connect":[{"name":"` + w.marker(cycle) + `","actions":[{"type":"deny"}]}]}`
		return w.update(p, o, "PUT", o.path+"/traffic_policy", map[string]any{"module": map[string]any{"value": v}},
			map[string]any{"traffic_policy.value": v})
	default:
		objs := w.live("")
		if len(objs) == 0 {
			return nil
		}
		o := objs[w.rng.IntN(len(objs))]
		if o.kind == "reserved_domain" && w.hasEdge(o) {
			return nil
		}
		o.deleting = true
		status, body, err := w.m.do(p, "DELETE", o.path, nil)
		if err != nil {
			return err
		}
		o.deleting = false
		switch status {
		case 204:
			o.deleted = true
			w.acked++
		default:
			t.Errorf("DELETE %s: status %d %v", o.path, status, body)
		}
		return nil
	}
}

// hasEdge reports whether an edge of the writer may hold the domain.
func (w *crashWriter) hasEdge(d *crashObj) bool {
	for _, o := range w.objs {
		if o.domain == d && !o.deleted {
			return true
		}
	}
	return false
}

func (w *crashWriter) create(p *proc, o *crashObj, body map[string]any) error {
	t := w.m.t
	o.pending = project(o.kind, normalize(map[string]any{"description": body["description"], "metadata": body["metadata"],
		"acl": body["acl"], "domain": body["domain"], "hostports": body["hostports"]}))
	w.objs = append(w.objs, o)
	status, doc, err := w.m.do(p, "POST", crashKinds[o.kind], body)
	if err != nil {
		return err
	}
	if status != 201 {
		t.Errorf("POST %s %v: status %d %v", crashKinds[o.kind], body, status, doc)
		w.objs = w.objs[:len(w.objs)-1]
		return nil
	}
	got := project(o.kind, doc)
	if !reflect.DeepEqual(got, o.pending) {
		t.Errorf("POST %s answered %v, want %v", crashKinds[o.kind], got, o.pending)
	}
	o.path, o.state, o.pending, o.created = crashKinds[o.kind]+"/"+doc["id"].(string), got, nil, true
	w.acked++
	return nil
}

// update sends a PATCH or module PUT that changes the tracked fields as change says.
func (w *crashWriter) update(p *proc, o *crashObj, method, path string, body, change map[string]any) error {
	t := w.m.t
	o.pending = merged(o.state, change)
	status, doc, err := w.m.do(p, method, path, body)
	if err != nil {
		return err
	}
	if status != 200 {
		t.Errorf("%s %s %v: status %d %v", method, path, body, status, doc)
		o.pending = nil
		return nil
	}
	o.state, o.pending = o.pending, nil
	if method == "PATCH" {
		if got := project(o.kind, doc); !reflect.DeepEqual(got, o.state) {
			t.Errorf("PATCH %s answered %v, want %v", path, got, o.state)
		}
	}
	w.acked++
	return nil
}

// verify checks, after a restart, every object the writers know of and every list, then makes
// what it saw the new acknowledged state.
func (m *crashModel) verify(p *proc, writers []*crashWriter) {
	t := m.t
	t.Helper()
	// Every list parses, and every object in it has all the fields of its kind; markers of
	// unanswered creates are found at most once.
	byMarker := map[string]map[string]any{}
	for kind, path := range crashKinds {
		next := path + "?limit=100"
		for next != "" {
			status, doc, err := m.do(p, "GET", next, nil)
			if err != nil || status != 200 {
				t.Fatalf("GET %s: %d %v", next, status, err)
			}
			items, ok := doc[crashListKeys[kind]].([]any)
			if !ok {
				t.Fatalf("GET %s: no list: %v", next, doc)
			}
			for _, it := range items {
				item := it.(map[string]any)
				if keys := sortedKeys(item); !reflect.DeepEqual(keys, m.keys[kind]) {
					t.Errorf("a %s in the list has the fields %v, want %v: %v", kind, keys, m.keys[kind], item)
				}
				if d, _ := item["description"].(string); d != "" {
					if _, dup := byMarker[kind+" "+d]; dup { // every description the writers send is new
						t.Errorf("two %ss with description %q: a create landed twice", kind, d)
					}
					byMarker[kind+" "+d] = item
				}
			}
			n, _ := doc["next_page_uri"].(string)
			next = ""
			if n != "" {
				next = n[strings.Index(n, path):]
			}
		}
	}
	for _, w := range writers {
		var keep []*crashObj
		for _, o := range w.objs {
			if !o.created {
				// An unanswered create: the object exists once, with what was sent, or not at all.
				item, found := byMarker[o.kind+" "+o.marker]
				if !found {
					continue
				}
				if got := project(o.kind, item); !reflect.DeepEqual(got, o.pending) {
					t.Errorf("a %s whose create was in flight at the kill holds %v, want %v", o.kind, got, o.pending)
				}
				o.path, o.created = crashKinds[o.kind]+"/"+item["id"].(string), true
			}
			status, doc, err := m.do(p, "GET", o.path, nil)
			if err != nil {
				t.Fatalf("GET %s: %v", o.path, err)
			}
			switch {
			case o.deleted:
				if status != 404 {
					t.Errorf("GET %s after an acknowledged delete: status %d %v", o.path, status, doc)
				}
				continue
			case status == 404 && o.deleting:
				continue // the delete in flight at the kill landed
			case status != 200:
				t.Errorf("GET %s, acknowledged and not deleted: status %d %v", o.path, status, doc)
				continue
			}
			if keys := sortedKeys(doc); !reflect.DeepEqual(keys, m.keys[o.kind]) {
				t.Errorf("GET %s: fields %v, want %v", o.path, keys, m.keys[o.kind])
			}
			got := project(o.kind, doc)
			if !reflect.DeepEqual(got, o.state) && (o.pending == nil || !reflect.DeepEqual(got, o.pending)) {
				if o.pending == nil {
					t.Errorf("GET %s: %v, but the acknowledged state is %v", o.path, got, o.state)
				} else {
					t.Errorf("GET %s: %v, but the acknowledged state is %v and the write in flight would have made %v", o.path, got, o.state, o.pending)
				}
			}
			o.state, o.pending, o.deleting = got, nil, false
			keep = append(keep, o)
		}
		// Edges whose domain is gone from the model keep it as a plain pointer; that is enough.
		w.objs = keep
	}
}
