package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsoleSettingsAreChecked: --console must be a boolean and the inspector's bounds numbers
// in range; each mistake stops serve with a message naming the setting and what it held.
func TestConsoleSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--console", "maybe"}, `--console must be true or false, got "maybe"`},
		{[]string{"EDGEPLANE_CONSOLE=sometimes"}, nil, `EDGEPLANE_CONSOLE must be true or false, got "sometimes"`},
		{nil, []string{"--inspect-entries", "-1"}, "--inspect-entries must be at least 0, got -1"},
		{[]string{"EDGEPLANE_INSPECT_ENTRIES=many"}, nil, `EDGEPLANE_INSPECT_ENTRIES must be a whole number of at least 0, got "many"`},
		{nil, []string{"--inspect-account-bytes", "0"}, "--inspect-account-bytes must be at least 1, got 0"},
		{nil, []string{"--inspect-account-bytes", "8", "--inspect-total-bytes", "4"}, "--inspect-total-bytes must be at least 8, got 4"},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "x.db")}, c.args...)
		_, stderr, code := runBin(t, c.env, args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %q: exit %d, stderr %q, want %q", c.env, c.args, code, stderr, c.want)
		}
	}
}

// TestConsoleCanBeTurnedOff: /console/ is served by default and, with --console=false, is the
// API's own 404 like any unknown path.
func TestConsoleCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args   []string
		status int
		text   string
	}{
		{nil, http.StatusOK, "Sign in to the console"},
		{[]string{"--console=false"}, http.StatusNotFound, "no API path /console/signin"},
	} {
		p := startServer(t, filepath.Join(t.TempDir(), "x.db"), c.args...)
		resp, err := http.Get(p.url("/console/signin"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.text) {
			t.Errorf("%q: GET /console/signin: %d %.300s", c.args, resp.StatusCode, body)
		}
		if c.args == nil && (resp.Header.Get("Content-Security-Policy") == "" || !strings.Contains(p.Stderr.String(), `msg="web console"`)) {
			t.Errorf("the console has no CSP, or serve did not log where it is:\n%s", p.Stderr.String())
		}
	}
}
