package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strings"

	"github.com/edgeplane/edgeplane/pki"
	"github.com/edgeplane/edgeplane/store"
)

// The deployment's own keys, kept in the database so that every replica shares them: the CA
// that signs the agent listener's and the public endpoints' certificates, and the key sealing
// the sign-in modules' session cookies.

// caName is the name of edgeplane's CA among the deployment's secrets.
const caName = "edgeplane-ca"

// loadCA returns edgeplane's CA, making it on first use and sharing it through the database.
func loadCA(ctx context.Context, st *store.Store) (*pki.CA, error) {
	certPEM, keyPEM, err := st.SystemSecret(ctx, caName, func() (string, string, error) {
		return pki.NewCA("edgeplane CA")
	})
	if err != nil {
		return nil, fmt.Errorf("edgeplane CA: %w", err)
	}
	return pki.LoadCA(certPEM, keyPEM)
}

// sessionKeyName is the name of the key sealing sign-in sessions among the deployment's secrets.
const sessionKeyName = "identity-sessions"

// loadSessionKey returns the 32-byte key of the sign-in modules' session cookies, made on first
// use and shared through the database, so a cookie one replica sets opens on every other.
func loadSessionKey(ctx context.Context, st *store.Store) ([]byte, error) {
	_, b64, err := st.SystemSecret(ctx, sessionKeyName, func() (string, string, error) {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return "", "", err
		}
		return "", base64.StdEncoding.EncodeToString(k), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s key: %w", sessionKeyName, err)
	}
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("%s key: the stored key is not 32 bytes of base64", sessionKeyName)
	}
	return k, nil
}

// printCA writes edgeplane's CA certificate (PEM) to stdout, making the CA if no server has yet.
func printCA(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ca", stdout, stderr)
	dsn := fs.String("db", env("EDGEPLANE_DB", "edgeplane.db"), "database (env EDGEPLANE_DB)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "redirect stdout to a file"); err != nil {
		return err
	}
	st, err := openExisting(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	ca, err := loadCA(ctx, st)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, strings.TrimSpace(ca.CertPEM)+"\n")
	return err
}
