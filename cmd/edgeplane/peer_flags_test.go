package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPeerFlagsAreChecked: the link's flags are refused with a message naming the flag, before
// anything is created: a listen address on every interface without --peer-advertise (the
// others could not dial it), an advertised address that is not a dialable host:port, an
// advertised address without a link, a link without the data plane, a port in use.
func TestPeerFlagsAreChecked(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--peer-listen", "0.0.0.0:0"}, "--peer-listen 0.0.0.0:0 listens on every interface: give --peer-advertise"},
		{nil, []string{"--peer-listen", ":0"}, "--peer-listen :0 listens on every interface: give --peer-advertise"},
		{[]string{"EDGEPLANE_PEER_LISTEN=0.0.0.0:0"}, nil, "listens on every interface: give --peer-advertise"},
		{nil, []string{"--peer-listen", "127.0.0.1:0", "--peer-advertise", "0.0.0.0:7443"}, `--peer-advertise "0.0.0.0:7443": no host other replicas can dial`},
		{nil, []string{"--peer-listen", "127.0.0.1:0", "--peer-advertise", "replica-1"}, `--peer-advertise "replica-1": not host:port`},
		{nil, []string{"--peer-listen", "127.0.0.1:0", "--peer-advertise", "replica-1:0"}, `--peer-advertise "replica-1:0": no port other replicas can dial`},
		{nil, []string{"--peer-advertise", "replica-1:7443"}, "--peer-advertise needs --peer-listen"},
		{nil, []string{"--agent-listen", "", "--peer-listen", "127.0.0.1:0"}, "--peer-listen needs the data plane"},
		{nil, []string{"--peer-listen", busy.Addr().String()}, "--peer-listen: listen tcp " + busy.Addr().String()},
	} {
		db := filepath.Join(t.TempDir(), "x.db")
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--db", db, "--agent-listen", "127.0.0.1:0",
			"--http-listen", "", "--https-listen", ""}, c.args...)
		_, stderr, code := runBin(t, c.env, args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %q: exit %d, stderr %q, want %q", c.env, c.args, code, stderr, c.want)
		}
		if _, err := os.Stat(db); err == nil {
			t.Errorf("%v %q: a refused start created %s", c.env, c.args, db)
		}
	}
}
