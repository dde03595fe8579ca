package certmgr

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/crypto/acme"

	"github.com/edgeplane/edgeplane/pki"
	"github.com/edgeplane/edgeplane/store"
)

// issued is a certificate obtained from the ACME server: the chain (leaf first) and its key, in
// PEM, and the parsed leaf.
type issued struct {
	chainPEM, keyPEM string
	leaf             *x509.Certificate
}

// dnsError is a failure the user must correct: the ACME server could not validate the name
// through edgeplane, or refuses the name. It becomes DNS_ERROR.
type dnsError struct{ msg string }

func (e *dnsError) Error() string { return e.msg }

// obtain runs one ACME order for host, resuming the job's order when it is still usable: an
// order whose authorizations are pending or valid is taken up where it was, anything else is
// replaced by a new order. The certificate's key, of keyType, is made just before finalization.
func (m *Manager) obtain(ctx context.Context, w *work, keyType string) (*issued, error) {
	client, err := m.client(ctx)
	if err != nil {
		return nil, err
	}
	var order *acme.Order
	if w.job.OrderURL != "" {
		if o, err := client.GetOrder(ctx, w.job.OrderURL); err == nil && (o.Status == acme.StatusPending || o.Status == acme.StatusReady) {
			order = o
			m.log.Info("certificate manager: resuming the order in progress", "domain", w.host, "order", o.URI, "status", o.Status)
		}
	}
	if order == nil {
		if order, err = client.AuthorizeOrder(ctx, acme.DomainIDs(w.host)); err != nil {
			return nil, w.classify("could not place an order", err)
		}
		url := order.URI
		if err := m.cfg.Store.UpdateACMEJob(ctx, w.domainID, m.cfg.Replica, m.lease(), func(u *store.ACMEJobUpdate) { u.OrderURL = &url }); err != nil {
			return nil, err
		}
		m.log.Info("certificate manager: order placed", "domain", w.host, "order", url)
	}
	for _, zurl := range order.AuthzURLs {
		if err := m.authorize(ctx, client, w, zurl); err != nil {
			return nil, err
		}
	}
	if order, err = client.WaitOrder(ctx, order.URI); err != nil {
		return nil, w.classify("the order did not become ready", err)
	}
	key, err := newKey(keyType)
	if err != nil {
		return nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{w.host}}, key)
	if err != nil {
		return nil, err
	}
	der, _, err := client.CreateOrderCert(ctx, order.FinalizeURL, csr, true)
	if err != nil {
		return nil, w.classify("could not finalize the order", err)
	}
	return encodeIssued(der, key)
}

// authorize answers the authorization at zurl with the manager's challenge type and waits until
// the ACME server has validated it. The key authorization is stored with the job, where every
// replica's listeners find it.
func (m *Manager) authorize(ctx context.Context, client *acme.Client, w *work, zurl string) error {
	z, err := client.GetAuthorization(ctx, zurl)
	if err != nil {
		return w.classify("could not read an authorization", err)
	}
	switch z.Status {
	case acme.StatusValid:
		return nil
	case acme.StatusPending:
	default:
		return &dnsError{msg: fmt.Sprintf("The ACME server's authorization of %s is %s; the next attempt starts a new order.", w.host, z.Status)}
	}
	typ := w.challenge(m.cfg.Challenge)
	var chal *acme.Challenge
	for _, c := range z.Challenges {
		if c.Type == typ {
			chal = c
		}
	}
	if chal == nil {
		if w.dnsName != "" {
			return &dnsError{msg: fmt.Sprintf("The ACME server offers no %s challenge for %s, the only challenge a wildcard certificate can be validated with.", typ, w.host)}
		}
		return &dnsError{msg: fmt.Sprintf("The ACME server offers no %s challenge for %s, the only challenge this edgeplane server answers with its listeners.", typ, w.host)}
	}
	keyAuth, err := client.HTTP01ChallengeResponse(chal.Token) // the key authorization, for either type
	if err != nil {
		return err
	}
	answer, dnsName := [2]string{chal.Token, keyAuth}, w.dnsName
	if err := m.cfg.Store.UpdateACMEJob(ctx, w.domainID, m.cfg.Replica, m.lease(), func(u *store.ACMEJobUpdate) {
		u.Challenge, u.DNSName = &answer, &dnsName
	}); err != nil {
		return err
	}
	if chal.Status == acme.StatusPending { // one already being validated (a resumed order) is only waited for
		if _, err := client.Accept(ctx, chal); err != nil {
			// A resumed order's challenge was answered before the restart and may have been
			// validated since it was read: then there is nothing to accept, only to wait for.
			c, gerr := client.GetChallenge(ctx, chal.URI)
			if gerr != nil || (c.Status != acme.StatusValid && c.Status != acme.StatusProcessing) {
				return w.classify("did not accept the challenge answer", err)
			}
		}
	}
	if _, err := client.WaitAuthorization(ctx, zurl); err != nil {
		return w.classify("could not validate the "+typ+" challenge", err)
	}
	return nil
}

// classify is classifyACME for the work's name, with what the user must fix when validation
// fails: for a wildcard domain, the CNAME record that leads the ACME server to edgeplane's DNS.
func (w *work) classify(what string, err error) error {
	fix := listenersFix(w.host)
	if w.dnsName != "" {
		fix = fmt.Sprintf("Make sure _acme-challenge.%s is a CNAME record pointing at %s (the domain's acme_challenge_cname_target) "+
			"and that the zone of %s is delegated to this edgeplane server's DNS (--dns-listen)", strings.TrimPrefix(w.host, "*."), w.dnsName, w.dnsName)
	}
	return classifyACME(w.host, fix, what, err)
}

// listenersFix is what the user must fix when the ACME server cannot validate host through the
// public listeners.
func listenersFix(host string) string {
	return fmt.Sprintf("Make sure %s resolves to this edgeplane server's public listeners (HTTP on port 80 for http-01, TLS on port 443 for tls-alpn-01)", host)
}

// classifyACME turns an error of the ACME client into a dnsError when the ACME server says the
// name cannot be validated (the msg then says fix) or issued for, and into a plain error
// (INTERNAL_ERROR, retried) otherwise.
func classifyACME(host, fix, what string, err error) error {
	var aerr *acme.AuthorizationError
	if errors.As(err, &aerr) {
		details := make([]string, 0, len(aerr.Errors))
		for _, e := range aerr.Errors {
			details = append(details, problemDetail(e))
		}
		return &dnsError{msg: fmt.Sprintf("The ACME server could not validate %s through edgeplane (%s). %s, "+
			"then set the certificate_management_policy again to retry.", host, strings.Join(details, "; "), fix)}
	}
	var oerr *acme.OrderError
	if errors.As(err, &oerr) && oerr.Status == acme.StatusInvalid {
		detail := "no reason given"
		if oerr.Problem != nil {
			detail = problemDetail(oerr.Problem)
		}
		return &dnsError{msg: fmt.Sprintf("The ACME server marked the order for %s invalid (%s); set the certificate_management_policy again to retry.", host, detail)}
	}
	var perr *acme.Error
	if errors.As(err, &perr) && isPermanentProblem(perr.ProblemType) {
		return &dnsError{msg: fmt.Sprintf("The ACME server refuses to issue a certificate for %s (%s).", host, problemDetail(perr))}
	}
	return fmt.Errorf("the ACME server %s: %w", what, err)
}

// isPermanentProblem reports whether an ACME problem type is one only the user can correct.
func isPermanentProblem(t string) bool {
	for _, p := range []string{"rejectedIdentifier", "caa", "dns", "unsupportedIdentifier"} {
		if t == "urn:ietf:params:acme:error:"+p {
			return true
		}
	}
	return false
}

// problemDetail is an ACME problem in plain words: its detail, else its type.
func problemDetail(err error) string {
	var perr *acme.Error
	if errors.As(err, &perr) {
		if perr.Detail != "" {
			return perr.Detail
		}
		return strings.TrimPrefix(perr.ProblemType, "urn:ietf:params:acme:error:")
	}
	return err.Error()
}

// newKey makes a certificate key of the policy's private_key_type: RSA 2048 or ECDSA P-256.
func newKey(keyType string) (crypto.Signer, error) {
	switch keyType {
	case "rsa":
		return rsa.GenerateKey(rand.Reader, 2048)
	case "ecdsa":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	return nil, fmt.Errorf("unknown private_key_type %q", keyType)
}

// encodeIssued checks the chain the ACME server returned and encodes it with the key.
func encodeIssued(der [][]byte, key crypto.Signer) (*issued, error) {
	if len(der) == 0 {
		return nil, errors.New("the ACME server returned no certificate")
	}
	chain := make([]*x509.Certificate, len(der))
	for i, b := range der {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("the ACME server returned a certificate that does not parse: %w", err)
		}
		chain[i] = c
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &issued{
		chainPEM: pki.EncodeCertificates(chain),
		keyPEM:   string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
		leaf:     chain[0],
	}, nil
}

// accountKeyName is the deployment secret holding the ACME account key.
const accountKeyName = "acme-account"

// client returns the ACME client, registering the account on first use. The account key is an
// ECDSA P-256 key kept, encrypted, among the deployment's secrets, so every replica (and every
// restart) uses the same account.
func (m *Manager) client(ctx context.Context) (*acme.Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acme != nil {
		return m.acme, nil
	}
	_, keyPEM, err := m.cfg.Store.SystemSecret(ctx, accountKeyName, func() (string, string, error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return "", "", err
		}
		pub, err := x509.MarshalPKIXPublicKey(k.Public())
		if err != nil {
			return "", "", err
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
			string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
	})
	if err != nil {
		return nil, fmt.Errorf("ACME account key: %w", err)
	}
	key, _, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ACME account key: %w", err)
	}
	c := &acme.Client{Key: key, DirectoryURL: m.cfg.Directory, HTTPClient: m.httpClient, UserAgent: "edgeplane"}
	dir, err := c.Discover(ctx)
	if err != nil {
		return nil, directoryError(m.cfg.Directory, err)
	}
	if dir.RegURL == "" || dir.OrderURL == "" {
		return nil, fmt.Errorf("%s did not answer as an ACME directory (it names no newAccount or newOrder URL)", m.cfg.Directory)
	}
	var contact []string
	if m.cfg.Email != "" {
		contact = []string{"mailto:" + m.cfg.Email}
	}
	if _, err := c.Register(ctx, &acme.Account{Contact: contact}, acme.AcceptTOS); err != nil && !errors.Is(err, acme.ErrAccountAlreadyExists) {
		return nil, classifyACME("the account", listenersFix("the account"), "refused the account registration", err)
	}
	m.acme = c
	return c, nil
}

// directoryError says in plain words why the ACME directory could not be read: nothing answered
// at its address (or its HTTPS was not trusted, or it timed out), or what answered is not an
// ACME server. Either is temporary as far as the domain is concerned (INTERNAL_ERROR, retried).
func directoryError(dir string, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return fmt.Errorf("the ACME directory %s could not be reached (%v)", dir, uerr.Err)
	}
	var aerr *acme.Error
	if errors.As(err, &aerr) && aerr.ProblemType == "" {
		return fmt.Errorf("%s did not answer as an ACME directory (HTTP %d %s)", dir, aerr.StatusCode, http.StatusText(aerr.StatusCode))
	}
	var serr *json.SyntaxError
	if errors.As(err, &serr) {
		return fmt.Errorf("%s did not answer as an ACME directory (its answer is not JSON)", dir)
	}
	return fmt.Errorf("%s did not answer as an ACME directory (%v)", dir, err)
}
