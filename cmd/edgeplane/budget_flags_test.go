package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestResponseBudgetAndPublicIdleSettingsAreChecked: --response-budget below zero and a
// --public-idle-timeout that is not a positive duration stop serve with a message naming them.
func TestResponseBudgetAndPublicIdleSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--response-budget", "-1"}, "--response-budget must be at least 0, got -1"},
		{[]string{"EDGEPLANE_RESPONSE_BUDGET=lots"}, nil, `EDGEPLANE_RESPONSE_BUDGET must be a whole number of at least 0, got "lots"`},
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
