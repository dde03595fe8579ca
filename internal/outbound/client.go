package outbound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// Options configure a guarded client. The zero Options trust the system's roots and refuse
// every non-public address.
type Options struct {
	// Roots are the CAs https servers are verified against (nil: the system's).
	Roots *x509.CertPool
	// AllowPrivate lets the client reach non-public addresses too, for labs and tests whose
	// identity providers and key sets run on the operator's own network
	// (--outbound-allow-private).
	AllowPrivate bool
	// Allow are ranges reachable although not public, when AllowPrivate is off.
	Allow []netip.Prefix
}

// Bounds of the guarded client: a provider that accepts a connection and never answers must not
// hold a visitor's request for long.
const (
	dialTimeout    = 10 * time.Second
	headerTimeout  = 10 * time.Second
	requestTimeout = 15 * time.Second
	maxRedirects   = 3
)

// RefusedError is a connection the guard refused: the address it resolved to is not public.
type RefusedError struct {
	Addr  netip.Addr
	Class string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused to connect to %s: %s (edgeplane connects to no loopback, private, link-local or other non-public address for an account's configuration unless started with --outbound-allow-private)",
		e.Addr, e.Reason())
}

// Reason names the class of the refused address without the address itself, for a page a
// visitor sees: the operator's internal addressing is none of the visitor's business.
func (e *RefusedError) Reason() string {
	return "the address is " + article(e.Class) + " " + e.Class + " address, which this server does not connect to for an account's configuration"
}

func article(class string) string {
	if strings.ContainsRune("aeiou", rune(class[0])) {
		return "an"
	}
	return "a"
}

// Refused returns the refusal err holds, if any (through the url.Error and net.OpError an
// http.Client wraps a failed dial in).
func Refused(err error) (*RefusedError, bool) {
	var r *RefusedError
	ok := errors.As(err, &r)
	return r, ok
}

// Check returns a *RefusedError when the host:port address (a literal IP, as a dialer's
// Control function gets it after resolution) is one o does not reach; an address that does not
// parse is refused as unspecified.
func (o Options) Check(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		host, _, _ := net.SplitHostPort(address)
		a, perr := netip.ParseAddr(host)
		if perr != nil {
			return &RefusedError{Class: ClassUnspecified}
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	a := ap.Addr().WithZone("").Unmap()
	class := Classify(a)
	if class == "" || o.AllowPrivate {
		return nil
	}
	for _, p := range o.Allow {
		if p.Contains(a) {
			return nil
		}
	}
	return &RefusedError{Addr: a, Class: class}
}

// Dialer returns a dialer that checks the address of every connection it makes, after the
// name was resolved and before the connection is attempted: when a name resolves to several
// addresses, the refused ones are skipped and the next tried.
func (o Options) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second,
		ControlContext: func(_ context.Context, network, address string, _ syscall.RawConn) error {
			if !strings.HasPrefix(network, "tcp") && !strings.HasPrefix(network, "udp") {
				return fmt.Errorf("refused to connect over %s", network)
			}
			return o.Check(address)
		}}
}

// NewTransport returns a transport whose every connection goes through o's dialer. It uses no
// proxy from the environment: the guard checks the address a connection is made to, and a
// proxy would make that the proxy's, leaving the target unchecked.
func NewTransport(o Options) *http.Transport {
	return &http.Transport{
		DialContext:           o.Dialer().DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: o.Roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: headerTimeout,
	}
}

// NewClient returns the client for the requests an account's configuration makes edgeplane
// send: o's transport, each request bounded to 15 s, following at most 3 redirects (each one's
// connection checked as the first was).
func NewClient(o Options) *http.Client {
	return &http.Client{Transport: NewTransport(o), Timeout: requestTimeout,
		CheckRedirect: func(_ *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return http.ErrUseLastResponse
			}
			return nil
		}}
}
