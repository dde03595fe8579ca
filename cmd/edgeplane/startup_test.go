package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// A first start that fails on its configuration must not consume the one-time bootstrap token:
// the next, corrected start prints it.
func TestFailedFirstStartKeepsBootstrapToken(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	for name, args := range map[string][]string{
		"bad base url": {"--listen", "127.0.0.1:0", "--base-url", "not a url"},
		"port in use":  {"--listen", busy.Addr().String()},
		"bad tcp port": {"--listen", "127.0.0.1:0", "--tcp-port-range", "9-1"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "edgeplane.db")
			_, stderr, code := runBin(t, nil, append([]string{"serve", "--db", db}, args...)...)
			if code == 0 {
				t.Fatalf("serve succeeded; stderr:\n%s", stderr)
			}
			if strings.Contains(stderr, tokenSentence) {
				t.Fatalf("a failed start printed the bootstrap token:\n%s", stderr)
			}
			p := startServer(t, db)
			if _, ok := bootstrapToken(t, p.Stderr.String()); !ok {
				t.Fatalf("the corrected start printed no token; stderr:\n%s", p.Stderr)
			}
		})
	}
}

func TestAPIKeyCreateRefusesArguments(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgeplane.db")
	stdout, stderr, code := runBin(t, nil, "apikey", "create", "--db", db, "other")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "--account other") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
