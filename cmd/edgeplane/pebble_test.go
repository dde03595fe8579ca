package main

// The Pebble ACME server of the managed certificate tests (internal/pebbletest, shared with the
// certmgr tests): Debian's pebble package, started on 127.0.0.1 with its test DNS server, which
// answers every name with 127.0.0.1, so the challenges of any reserved domain reach the
// edgeplane under test. Pebble's validation authority connects to the ports its configuration
// names: edgeplane's HTTP and TLS listeners.

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/pebbletest"
)

// pebble is a running Pebble with its DNS server.
type pebble struct {
	*pebbletest.Pebble
	directory string // the ACME directory URL
	roots     string // PEM file of the CA of its HTTPS, for --acme-ca-roots
}

// pebbleOptions configure a Pebble.
type pebbleOptions struct {
	httpPort, tlsPort int           // where the validation authority reaches edgeplane
	validity          time.Duration // lifetime of the certificates it issues; 0 for Pebble's default
	vaSleep           time.Duration // bound of the random delay before each validation; 0 for none
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int { return pebbletest.FreePort(t) }

// startPebble starts Pebble and its DNS server for the test, or skips the test, saying why, where
// the pebble package is not installed.
func startPebble(t *testing.T, o pebbleOptions) *pebble {
	t.Helper()
	p := pebbletest.Start(t, pebbletest.Options{HTTPPort: o.httpPort, TLSPort: o.tlsPort, Validity: o.validity, VASleep: o.vaSleep})
	return &pebble{Pebble: p, directory: p.Directory, roots: p.RootsFile}
}

// setA makes the test DNS server answer host with addr only; "" returns host to the default
// answer, 127.0.0.1.
func (p *pebble) setA(t *testing.T, host, addr string) { p.SetA(t, host, addr) }

// decodeJSON decodes an API response body.
func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return m
}
