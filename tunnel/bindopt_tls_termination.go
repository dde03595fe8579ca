package tunnel

import (
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/pki"
	"github.com/edgeplane/edgeplane/plan"
)

// Bounds of the certificate and key a tls bind may give for TLS termination. A chain of a few
// certificates and an 8192-bit RSA key fit well within them; anything larger would cost memory
// for the whole bind and CPU in every handshake.
const (
	maxTerminationCertPEM = 64 << 10
	maxTerminationKeyPEM  = 16 << 10
	maxTerminationChain   = 8
	// maxTerminationRSABits is the largest RSA key accepted, the same bound crypto/tls puts on
	// the RSA keys of the peers it verifies.
	maxTerminationRSABits = 8192
)

// parseTermination reads the TLSTermination option of a tls bind ({cert, key, sealed_key}, PEM
// as base64; what ngrok-go's WithTermination and WithTLSTermination send) into the certificate
// the public listener terminates the endpoint's TLS with. Without cert and key it is nil: ngrok
// then uses the certificate it provisions for the domain, and edgeplane the host's (its CA's,
// or the one uploaded for the reserved domain). A sealed_key is encrypted for ngrok's servers
// and cannot be opened here: the bind is refused with ERR_NGROK_3208 naming it. A key that does
// not belong to the chain's leaf, or a chain out of order, refuses the bind (ERR_NGROK_301).
func parseTermination(raw json.RawMessage) (*tls.Certificate, error) {
	var o struct {
		Cert      []byte `json:"cert"`
		Key       []byte `json:"key"`
		SealedKey []byte `json:"sealed_key"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, errors.New("the option is not a JSON object with cert and key (base64 of PEM)")
	}
	if len(o.Key) == 0 && len(o.SealedKey) > 0 {
		return nil, &plan.OptionRefusal{Code: ep.AgentCodeUnsupportedOpt, Msg: "sealed_key is encrypted for ngrok's servers and edgeplane cannot open it; " +
			"give key itself (ngrok-go: config.WithTermination(certPEM, keyPEM))"}
	}
	switch {
	case len(o.Cert) == 0 && len(o.Key) == 0:
		return nil, nil
	case len(o.Cert) == 0 || len(o.Key) == 0:
		return nil, errors.New("give both cert and key, or neither to terminate with the host's certificate")
	case len(o.Cert) > maxTerminationCertPEM:
		return nil, fmt.Errorf("cert is %d bytes; at most %d are accepted", len(o.Cert), maxTerminationCertPEM)
	case len(o.Key) > maxTerminationKeyPEM:
		return nil, fmt.Errorf("key is %d bytes; at most %d are accepted", len(o.Key), maxTerminationKeyPEM)
	}
	chain, err := pki.ParseCertificates(string(o.Cert))
	if err != nil {
		return nil, fmt.Errorf("cert %v", err)
	}
	if len(chain) > maxTerminationChain {
		return nil, fmt.Errorf("cert holds %d certificates; at most %d are accepted (the leaf and its intermediates)", len(chain), maxTerminationChain)
	}
	leaf := chain[0]
	// Checked on the certificate, before the key is parsed: the key must match it anyway.
	if k, ok := leaf.PublicKey.(*rsa.PublicKey); ok && k.N.BitLen() > maxTerminationRSABits {
		return nil, fmt.Errorf("cert's key is a %d-bit RSA key; at most %d bits are accepted", k.N.BitLen(), maxTerminationRSABits)
	}
	key, _, err := pki.ParsePrivateKey(string(o.Key))
	if err != nil {
		return nil, fmt.Errorf("key %v", err)
	}
	if !pki.SamePublicKey(leaf.PublicKey, key.Public()) {
		return nil, fmt.Errorf("key does not match the certificate (the first in cert, %s): give the key the certificate was issued for", certName(leaf))
	}
	if err := pki.CheckChain(chain); err != nil {
		return nil, fmt.Errorf("cert: %v", err)
	}
	c := &tls.Certificate{PrivateKey: key, Leaf: leaf}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c, nil
}
