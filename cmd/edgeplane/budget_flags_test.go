package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestResponseBudgetAndPublicIdleSettingsAreChecked: --response-budget below zero, a
// --memory-limit under 32 MiB and a --public-idle-timeout that is not a positive duration stop
// serve with a message naming them.
func TestResponseBudgetAndPublicIdleSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--response-budget", "-1"}, "--response-budget must be at least 0, got -1"},
		{[]string{"EDGEPLANE_RESPONSE_BUDGET=lots"}, nil, `EDGEPLANE_RESPONSE_BUDGET must be a whole number of at least 0, got "lots"`},
		{nil, []string{"--memory-limit", "16"}, "--memory-limit must be at least 32, got 16"},
		{[]string{"EDGEPLANE_MEMORY_LIMIT=big"}, nil, `EDGEPLANE_MEMORY_LIMIT must be a whole number of at least 32, got "big"`},
		{nil, []string{"--public-idle-timeout", "0s"}, "--public-idle-timeout must be a positive duration"},
		{[]string{"EDGEPLANE_PUBLIC_IDLE_TIMEOUT=soon"}, nil, `--public-idle-timeout must be a positive duration like 5s, got "soon"`},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "x.db")}, c.args...)
		_, stderr, code := runBin(t, c.env, args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %q: exit %d, stderr %q, want %q", c.env, c.args, code, stderr, c.want)
		}
	}
}

// TestMemoryLimitFlag: --memory-limit is the garbage collector's soft memory limit of a server
// whose live data fits under it, as /metrics shows it; GOMEMLIMIT, the runtime's own setting,
// replaces it.
func TestMemoryLimitFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "go_gc_gomemlimit_bytes 2.097152e+08\n"},
		{[]string{"GOMEMLIMIT=300MiB"}, "go_gc_gomemlimit_bytes 3.145728e+08\n"},
	} {
		p := startServe(t, "", c.env, "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "x.db"), "--memory-limit", "200")
		res, err := http.Get(p.url("/metrics"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || !strings.Contains(string(b), c.want) {
			t.Errorf("%v: /metrics %d %v, want %q; it says %q", c.env, res.StatusCode, err, c.want, gcLines(string(b)))
		}
	}
}

// gcLines are the garbage collector's settings among the metrics.
func gcLines(metrics string) []string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "go_gc_go") {
			out = append(out, l)
		}
	}
	return out
}
