package ingress

import (
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/edgeplane/edgeplane/pki"
)

// Certs issues and caches the certificates edgeplane's CA signs for public hostnames that have
// no certificate of their own. Issued certificates are kept per name, at most maxCerts of them
// (the oldest half is dropped when full), and re-issued before they expire.
type Certs struct {
	ca *pki.CA
	// Allowed says whether a name is one edgeplane serves (an online endpoint or a reserved
	// domain); nil allows every name. It keeps a stranger from making the CA sign names at will.
	Allowed func(host string) bool
	// Uploaded returns the certificate uploaded for the reserved domain covering host, or nil;
	// it wins over the CA's.
	Uploaded func(host string) *tls.Certificate
	// ServiceDomains are the domains agents bind names under without a reservation
	// (--service-domains). A name under one that Allowed refuses (nothing online on it) still
	// gets a certificate, so its client reaches the "endpoint offline" page as it does over
	// plain HTTP: the wildcard of its parent, one certificate for every such name of one level,
	// so a stranger's names cost one signature per parent, not one per name.
	ServiceDomains []string

	mu    sync.Mutex
	certs map[string]*tls.Certificate
	order []string
}

const maxCerts = 10000

// NewCerts returns a certificate cache signing with ca.
func NewCerts(ca *pki.CA) *Certs {
	return &Certs{ca: ca, certs: map[string]*tls.Certificate{}}
}

// ErrUnknownName is the handshake error for a name edgeplane does not serve.
var ErrUnknownName = errors.New("ingress: no endpoint serves this name")

// Certificate returns the certificate for host: the one uploaded (or issued by ACME) for its
// reserved domain while it is valid, else one from edgeplane's CA, issued on first use. An
// expired one is not served: a client refuses it anyway, and the CA's at least names the host.
// A name under a service domain with nothing on it gets the CA's wildcard of its parent; any
// other name edgeplane does not serve is ErrUnknownName.
func (c *Certs) Certificate(host string) (*tls.Certificate, error) {
	if host == "" {
		return nil, ErrUnknownName
	}
	if c.Allowed != nil && !c.Allowed(host) {
		parent, ok := c.parked(host)
		if !ok {
			return nil, ErrUnknownName
		}
		return c.issue("*." + parent)
	}
	if c.Uploaded != nil {
		if cert := c.Uploaded(host); cert != nil && (cert.Leaf == nil || time.Now().Before(cert.Leaf.NotAfter)) {
			return cert, nil
		}
	}
	return c.issue(host)
}

// parked reports whether host is a name under a service domain (at any depth), and returns its
// parent: the domain its wildcard certificate covers it from.
func (c *Certs) parked(host string) (string, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, sd := range c.ServiceDomains {
		if strings.HasSuffix(host, "."+sd) {
			_, parent, _ := strings.Cut(host, ".")
			return parent, true
		}
	}
	return "", false
}

// issue returns the CA's certificate for name from the cache, issuing it when it is missing or
// expires within a day.
func (c *Certs) issue(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cert := c.certs[host]; cert != nil && time.Until(cert.Leaf.NotAfter) > 24*time.Hour {
		return cert, nil
	}
	cert, err := c.ca.Issue(host)
	if err != nil {
		return nil, err
	}
	if len(c.order) >= maxCerts {
		for _, h := range c.order[:maxCerts/2] {
			delete(c.certs, h)
		}
		c.order = append([]string(nil), c.order[maxCerts/2:]...)
	}
	if _, ok := c.certs[host]; !ok {
		c.order = append(c.order, host)
	}
	c.certs[host] = cert
	return cert, nil
}
