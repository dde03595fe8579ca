package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/ksuid"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/internal/testdb"
	"github.com/edgeplane/edgeplane/store"
)

// Server names of the durability rows.
const (
	srvFull      = "edgeplane --durability full"
	srvFullOne   = "full, one fsync'd transaction per create"
	srvFullGroup = "full, group commit (same harness)"
)

// durability measures creates under --durability full: the edgeplane binary (group commit), and,
// for the target's reference, the same store and server built by this program with group commit
// off (one transaction, so one fsync, per create) and, to show that the two harnesses agree, on.
// The three serve the same database file at once and are measured in rotating rounds.
func (b *runner) durability(ctx context.Context, dsn string, ds *dataset, createBody []byte) error {
	srv, err := b.startEdgeplane("sqlite", dsn, "full")
	if err != nil {
		return err
	}
	one, err := startChild(srvFullOne, b.self, []string{"reference-server", "--listen", "{addr}", "--db", dsn,
		"--durability", "full", "--max-batch", "1"}, nil, filepath.Join(b.work, "reference-one.log"))
	if err != nil {
		srv.stop()
		return err
	}
	defer one.stop()
	group, err := startChild(srvFullGroup, b.self, []string{"reference-server", "--listen", "{addr}", "--db", dsn,
		"--durability", "full"}, nil, filepath.Join(b.work, "reference-group.log"))
	if err != nil {
		srv.stop()
		return err
	}
	defer group.stop()
	createReq := func(c *child) workload {
		return workload{reqs: ds.createReqs(c.addr, "192.0.2.0/24", "allow", "created by the benchmark"), want: 201}
	}
	for _, c := range b.cfg.conc {
		cs := []contender{{srvFull, srv, createReq(srv)}, {srvFullOne, one, createReq(one)}}
		if c > 1 {
			cs = append(cs, contender{srvFullGroup, group, createReq(group)})
		}
		if err := b.measureAll(ctx, "sqlite", scCreate, "post", c, cs); err != nil {
			srv.stop()
			return err
		}
	}
	if b.cfg.skip["crash"] {
		srv.stop()
		return nil
	}
	return b.crashCheck(ctx, "sqlite", dsn, ds, srv, "full")
}

// crashCheck creates rules at c=16 and kills the server (SIGKILL) a second in, then opens the
// database and looks up every create the server acknowledged with 201.
func (b *runner) crashCheck(ctx context.Context, engine, dsn string, ds *dataset, srv *child, durability string) error {
	var (
		mu    sync.Mutex
		acked []string
	)
	wl := workload{
		reqs: ds.createReqs(srv.addr, "198.51.100.0/24", "deny", "crash check"),
		want: 201,
		onBody: func(body []byte) {
			id := idOf(body)
			mu.Lock()
			acked = append(acked, id)
			mu.Unlock()
		},
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		srv.kill()
	}()
	_, err := run(ctx, srv, wl, loadOpts{conc: 16, window: 10 * time.Second, maxRequests: 1000000, stopOnError: true})
	<-killed
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return fmt.Errorf("reopen after the crash: %w", err)
	}
	defer st.Close()
	missing := 0
	for _, id := range acked {
		if _, err := st.Get(ctx, ds.writes.caller.AccountID, ep.IPPolicyRules, "", id); err != nil {
			missing++
		}
	}
	verdict := "all present"
	if missing > 0 || len(acked) == 0 {
		verdict = fmt.Sprintf("FAILED: %d missing", missing)
	}
	mode := fmt.Sprintf("SQLite, `--durability %s`", durability)
	if engine == "postgres" {
		mode = "PostgreSQL"
	}
	line := fmt.Sprintf("%s: killed with SIGKILL during creates at c=16; %d creates acknowledged with 201, %d of them in the database after restart: %s.",
		mode, len(acked), len(acked)-missing, verdict)
	b.crash = append(b.crash, line)
	logf("crash check: %s", line)
	return nil
}

// idOf returns the "id" of a JSON object body, which edgeplane renders first.
func idOf(body []byte) string {
	_, rest, ok := bytes.Cut(body, []byte(`"id":"`))
	if !ok {
		return ""
	}
	id, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(id)
}

// freshSchema makes an empty schema on the PostgreSQL server and returns a DSN that uses it, and
// a function that drops it.
func freshSchema(ctx context.Context, base string) (string, func(), error) {
	schema := "ep_bench_" + strings.ToLower(ksuid.New().String())
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(cctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("create schema on %s: %w", testdb.PostgresEnv, err)
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := admin.ExecContext(dctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			logf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	}
	return testdb.WithSearchPath(base, schema), drop, nil
}

func engineTitle(engine string) string {
	if engine == "postgres" {
		return "PostgreSQL"
	}
	return "SQLite"
}
