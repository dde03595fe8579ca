package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestIsolationSettingsAreChecked: a quota below zero or no number, a share that is no number or
// percentage, and a timeout that is not a positive duration stop serve with a message naming the
// flag or its variable.
func TestIsolationSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--public-max-connections-per-account", "half"}, `--public-max-connections-per-account must be a whole number of at least 0 or a percentage like 50%, got "half"`},
		{nil, []string{"--public-max-connections-per-account", "150%"}, `--public-max-connections-per-account must be a whole number of at least 0 or a percentage like 50%, got "150%"`},
		{[]string{"EDGEPLANE_PUBLIC_MAX_CONNECTIONS_PER_ACCOUNT=-3"}, nil, `--public-max-connections-per-account must be a whole number of at least 0 or a percentage like 50%, got "-3"`},
		{nil, []string{"--public-header-timeout", "0s"}, `--public-header-timeout must be a positive duration like 10s, got "0s"`},
		{nil, []string{"--public-body-timeout", "-1s"}, `--public-body-timeout must be a positive duration like 1m0s, got "-1s"`},
		{[]string{"EDGEPLANE_PUBLIC_BODY_TIMEOUT=60"}, nil, `--public-body-timeout must be a positive duration like 1m0s, got "60"`},
		{[]string{"EDGEPLANE_PUBLIC_TCP_IDLE_TIMEOUT=forever"}, nil, `--public-tcp-idle-timeout must be a positive duration like 5m0s, got "forever"`},
		{nil, []string{"--agent-max-binds-per-session", "-1"}, "--agent-max-binds-per-session must be at least 0, got -1"},
		{[]string{"EDGEPLANE_AGENT_MAX_BINDS_PER_ACCOUNT=lots"}, nil, `EDGEPLANE_AGENT_MAX_BINDS_PER_ACCOUNT must be a whole number of at least 0, got "lots"`},
		{nil, []string{"--agent-max-tcp-ports-per-session", "-2"}, "--agent-max-tcp-ports-per-session must be at least 0, got -2"},
		{nil, []string{"--agent-max-tcp-ports-per-account", "x%"}, `--agent-max-tcp-ports-per-account must be a whole number of at least 0 or a percentage like 10%, got "x%"`},
		{nil, []string{"--agent-max-labeled-tunnels-per-session", "-1"}, "--agent-max-labeled-tunnels-per-session must be at least 0, got -1"},
		{nil, []string{"--agent-max-labeled-tunnels-per-account", "-1"}, "--agent-max-labeled-tunnels-per-account must be at least 0, got -1"},
		{[]string{"EDGEPLANE_AGENT_MAX_LABEL_BYTES=4k"}, nil, `EDGEPLANE_AGENT_MAX_LABEL_BYTES must be a whole number of at least 0, got "4k"`},
		{nil, []string{"--agent-window-budget-mib", "-1"}, "--agent-window-budget-mib must be at least 0, got -1"},
		{[]string{"EDGEPLANE_AGENT_WINDOW_BUDGET_MIB=64M"}, nil, `EDGEPLANE_AGENT_WINDOW_BUDGET_MIB must be a whole number of at least 0, got "64M"`},
		{nil, []string{"--agent-window-budget-mib", "9999999999999"}, "--agent-window-budget-mib must be at most 1048576 (1 TiB), got 9999999999999"},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "x.db")}, c.args...)
		_, stderr, code := runBin(t, c.env, args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %q: exit %d, stderr %q, want %q", c.env, c.args, code, stderr, c.want)
		}
	}
}

// TestShares: a limit given as a share of a total is that share, at least 1, and no limit when
// the total is none; a number is itself.
func TestShares(t *testing.T) {
	for _, c := range []struct {
		text  string
		total int
		want  int
	}{
		{"50%", 4096, 2048}, {"50%", 120, 60}, {"10%", 5, 1}, {"50%", 0, 0}, {"0%", 100, 0}, {"7", 100, 7}, {"0", 100, 0},
	} {
		s, err := parseShare("x", c.text, "50%")
		if err != nil {
			t.Fatalf("%q: %v", c.text, err)
		}
		if got := s.of(c.total); got != c.want {
			t.Errorf("%q of %d = %d, want %d", c.text, c.total, got, c.want)
		}
	}
}

// TestOutboundAllowPrivateIsChecked: EDGEPLANE_OUTBOUND_ALLOW_PRIVATE that is not a boolean stops
// serve with a message naming the variable and its value, rather than leaving the guard on or
// off by a guess.
func TestOutboundAllowPrivateIsChecked(t *testing.T) {
	t.Parallel()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "x.db")}
	_, stderr, code := runBin(t, []string{"EDGEPLANE_OUTBOUND_ALLOW_PRIVATE=sometimes"}, args...)
	if want := `EDGEPLANE_OUTBOUND_ALLOW_PRIVATE must be true or false, got "sometimes"`; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q, want %q", code, stderr, want)
	}
}
