package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Every encrypted secret lives in one of two tables, or inside a document: "secrets" (one row per
// object: the private keys of TLS certificates, SSH certificate authorities and routes' SAML
// request signing certificates, sealed with the object's id as additional data),
// "system_secrets" (deployment-wide secrets such as edgeplane's CA key, sealed with
// "system:"+name), and the fields of documents that their types declare secret (webhook secrets,
// OAuth and OIDC client secrets, sealed with "<id>#<field>": docsecrets.go). What must hold for
// all of them — serve's check that it can decrypt them, rotation, and the check of an import —
// reads them through allSecrets.

// ErrSecretsUndecryptable is wrapped by the errors that refuse a start, an open or an import
// because stored secrets (or a backup's) cannot be decrypted with the keys at hand; the message
// says which keys are missing and what to do.
var ErrSecretsUndecryptable = errors.New("secrets cannot be decrypted")

// systemAD is the additional data a deployment-wide secret is sealed with.
func systemAD(name string) string { return "system:" + name }

// storedSecret is one encrypted secret as stored.
type storedSecret struct {
	// table is "secrets" or "system_secrets"; key is the row's key there (object id or name).
	table, key string
	// ad is the additional data it was sealed with; sealed is the stored ciphertext.
	ad, sealed string
	// kind and field say where a secret kept in a document is (table "objects").
	kind, field string
}

// allSecrets reads every stored secret: those of the two tables, then those inside documents.
func allSecrets(ctx context.Context, q querier, dl dialect) ([]storedSecret, error) {
	out, err := tableSecrets(ctx, q)
	if err != nil {
		return nil, err
	}
	fields, err := fieldSecrets(ctx, q, dl)
	return append(out, fields...), err
}

// tableSecrets reads the secrets of the two secret tables, objects' first, each in key order.
func tableSecrets(ctx context.Context, q querier) ([]storedSecret, error) {
	var out []storedSecret
	for _, t := range []struct{ table, query string }{
		{"secrets", `SELECT object_id, data FROM secrets ORDER BY object_id`},
		{"system_secrets", `SELECT name, sealed FROM system_secrets ORDER BY name`},
	} {
		rows, err := q.QueryContext(ctx, t.query)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			s := storedSecret{table: t.table}
			if err := rows.Scan(&s.key, &s.sealed); err != nil {
				rows.Close()
				return nil, err
			}
			s.ad = s.key
			if t.table == "system_secrets" {
				s.ad = systemAD(s.key)
			}
			out = append(out, s)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sealKeyID returns the id of the key a stored secret names ("ep1:<id>:…"), or "" when it is
// not in the encrypted format.
func sealKeyID(sealed string) string {
	rest, ok := strings.CutPrefix(sealed, sealPrefix)
	id, _, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return ""
	}
	return id
}

// keyIDs lists the ids of the sealer's keys, in its order.
func (s *sealer) keyIDs() []string {
	ids := make([]string, len(s.keys))
	for i, k := range s.keys {
		ids[i] = k.id
	}
	return ids
}

// undecryptable opens every secret with the sealer and describes those that do not open: how
// many, under which key ids, and the first failure. It returns "" when all open.
func (s *sealer) undecryptable(all []storedSecret) string {
	failed := 0
	byKey := map[string]int{}
	var first string
	for _, sec := range all {
		if _, err := s.open(sec.ad, sec.sealed); err != nil {
			failed++
			id := sealKeyID(sec.sealed)
			if id == "" {
				id = "(not encrypted)"
			}
			byKey[id]++
			if first == "" {
				first = fmt.Sprintf("%s %s: %v", sec.table, sec.key, err)
			}
		}
	}
	if failed == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d secrets do not decrypt with the keys from %s (key ids %s): they were encrypted with key ids %s (first: %s)",
		failed, len(all), s.source, strings.Join(s.keyIDs(), ", "), countList(byKey), first)
}

// countList renders {"a": 2, "b": 1} as "a (2), b (1)", sorted by key.
func countList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s (%d)", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// CheckSecrets decrypts every stored secret, of objects and of the deployment, and returns an
// error wrapping ErrSecretsUndecryptable, saying what to do, when any does not decrypt with this
// store's keys. serve runs it before serving: a server that started anyway would answer 500 at
// the first use of each such secret.
func (s *Store) CheckSecrets(ctx context.Context) error {
	all, err := allSecrets(ctx, s.r, s.d)
	if err != nil {
		return s.classify(err)
	}
	if msg := s.seal.undecryptable(all); msg != "" {
		return fmt.Errorf("store: %w: %s. Start with the key that encrypted them: set %s to it (a list NEW,OLD also decrypts with OLD), "+
			"or put back the key file it was in; then `edgeplane secrets rotate` with %s=NEW,OLD re-encrypts them under NEW",
			ErrSecretsUndecryptable, msg, SecretKeyEnv, SecretKeyEnv)
	}
	return nil
}

// checkImportedSecrets decrypts every secret an import wrote (inside its transaction, so a
// refusal restores nothing): a backup holds its secrets encrypted under the source's keys, which
// it does not contain, and a target with other keys could not use them.
func (s *Store) checkImportedSecrets(ctx context.Context, tx *wtx) error {
	all, err := allSecrets(ctx, tx, s.d)
	if err != nil {
		return s.classify(err)
	}
	if msg := s.seal.undecryptable(all); msg != "" {
		return fmt.Errorf("store: import: %w: the backup's %s. Nothing was restored. A backup holds its secrets encrypted under the key of the database it came from, not the key itself: "+
			"run import again with that key, either as --key-file FILE (the file export --key-file wrote, or the source's key file SOURCE.db.key), "+
			"which encrypts them again under this database's own key, or as %s=SOURCE_KEY (the contents of that file, or the %s the source ran with), "+
			"kept for serve too",
			ErrSecretsUndecryptable, msg, SecretKeyEnv, SecretKeyEnv)
	}
	return nil
}

// secretCount counts the encrypted secrets and lists the ids of the keys they were encrypted
// with. Document secrets an older edgeplane stored in plaintext are not counted: the first start
// seals them under whatever key it has (runPendingTasks).
func secretCount(ctx context.Context, q querier, dl dialect) (int, []string, error) {
	all, err := allSecrets(ctx, q, dl)
	if err != nil {
		return 0, nil, err
	}
	return sealedCount(all)
}

// sealedCount is secretCount of secrets already read.
func sealedCount(all []storedSecret) (int, []string, error) {
	seen := map[string]bool{}
	var ids []string
	n := 0
	for _, sec := range all {
		id := sealKeyID(sec.sealed)
		if id == "" && sec.table == "objects" {
			continue
		}
		n++
		if id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return n, ids, nil
}
