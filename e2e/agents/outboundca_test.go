package agents

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeplane/edgeplane/pki"
)

// newOutboundCA makes a CA for the test's own https servers (key sets, identity providers,
// static backends over TLS) and writes its certificate to a file, for serve's --outbound-ca:
// the servers edgeplane fetches from or dials are then trusted through the flag alone.
func newOutboundCA(t *testing.T, name string) (ca *pki.CA, caFile string) {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	if ca, err = pki.LoadCA(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "outbound.pem")
	if err := os.WriteFile(caFile, []byte(certPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca, caFile
}
