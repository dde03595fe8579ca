package main

import (
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/edgeplane/edgeplane/certmgr"
	"github.com/edgeplane/edgeplane/ingress"
	"github.com/edgeplane/edgeplane/store"
)

// letsEncrypt is the default ACME directory: Let's Encrypt's production service.
const letsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

// acmeFlags are serve's flags of managed certificates.
type acmeFlags struct {
	directory, email, caRoots *string
}

func addACMEFlags(fs *flag.FlagSet) *acmeFlags {
	return &acmeFlags{
		directory: fs.String("acme-directory", env("EDGEPLANE_ACME_DIRECTORY", letsEncrypt),
			`ACME directory URL that managed certificates of reserved domains are ordered from; "" disables issuance (env EDGEPLANE_ACME_DIRECTORY)`),
		email: fs.String("acme-email", env("EDGEPLANE_ACME_EMAIL", ""),
			"contact email of the ACME account (env EDGEPLANE_ACME_EMAIL)"),
		caRoots: fs.String("acme-ca-roots", env("EDGEPLANE_ACME_CA_ROOTS", ""),
			"PEM file of the CAs trusted for the ACME directory's HTTPS instead of the system's, for a private or test CA (env EDGEPLANE_ACME_CA_ROOTS)"),
	}
}

// roots reads --acme-ca-roots; nil means the system's roots.
func (f *acmeFlags) roots() (*x509.CertPool, error) {
	if *f.caRoots == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(*f.caRoots)
	if err != nil {
		return nil, fmt.Errorf("--acme-ca-roots: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--acme-ca-roots: %s holds no PEM certificate", *f.caRoots)
	}
	return pool, nil
}

// startCertManager starts the certificate manager of the data plane and has the public
// listeners answer its challenges: HTTP-01 when the HTTP listener is on, else TLS-ALPN-01; the
// DNS server (--dns-listen) answers the DNS-01 challenges of wildcard domains.
func (d *dataPlane) startCertManager(f *acmeFlags, st *store.Store, log *slog.Logger) error {
	roots, err := f.roots()
	if err != nil {
		return err
	}
	challenge := certmgr.HTTP01
	if d.httpLn == nil {
		challenge = certmgr.TLSALPN01
	}
	if d.httpLn == nil && d.httpsLn == nil && *f.directory != "" {
		log.Warn("managed certificates cannot be validated: --http-listen and --https-listen are both off")
	}
	answers := certmgr.Answers{Store: st}
	d.pub.SetACME(ingress.ACMEAnswers{HTTP01: answers.HTTP01, TLSALPN01: answers.TLSALPN01})
	d.certs = certmgr.New(certmgr.Config{
		Store: st, Directory: *f.directory, Email: *f.email, Roots: roots,
		Replica: d.replica, Challenge: challenge, DNS01: d.dns != nil, Logger: log,
	})
	d.certs.Start()
	if *f.directory == "" {
		log.Info("managed certificates off (--acme-directory is empty)")
	} else {
		log.Info("managed certificates on", "acme_directory", *f.directory, "challenge", challenge)
	}
	return nil
}
