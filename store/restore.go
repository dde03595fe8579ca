package store

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// What a backup says about its secrets, and what a restore does beyond inserting rows.

// SecretProtection is the "secret_protection" member of a backup: which secrets the backup holds
// and how they are protected, so whoever holds the file knows what it exposes and what a restore
// needs. Import reads the rows themselves, not this summary.
type SecretProtection struct {
	// Summary says in one sentence which secrets the file holds and how they are protected:
	// "7 secrets (…), each sealed with AES-256-GCM under key id 1a2b3c4d; the key is not in this
	// file".
	Summary string `json:"summary"`
	// Encryption says how the secrets are sealed: those of the "secrets" and "system_secrets"
	// tables and those inside documents.
	Encryption string `json:"encryption"`
	// KeyIDs are the ids of the keys they were encrypted with (the first 8 hex digits of the
	// SHA-256 of each key); KeysIncluded is always false: a restore needs those keys.
	KeyIDs       []string `json:"key_ids"`
	KeysIncluded bool     `json:"keys_included"`
	// Restore says what a restore needs.
	Restore string `json:"restore"`
	// ObjectSecrets counts the objects' encrypted private keys by the objects' kind
	// ("tls_certificate", "ssh_certificate_authority").
	ObjectSecrets map[string]int `json:"object_secrets"`
	// DocumentSecrets counts the encrypted secrets inside objects' documents by the objects' kind
	// and the field: {"https_edge_route": {"webhook_verification.secret": 2,
	// "oauth.provider.github.client_secret": 1}}. They are sealed in place in the "doc" column.
	DocumentSecrets map[string]map[string]int `json:"document_secrets"`
	// SystemSecrets names the deployment's encrypted secrets ("edgeplane-ca": edgeplane's CA key).
	SystemSecrets []string `json:"system_secrets"`
	// Tokens says how API key and credential tokens are kept.
	Tokens string `json:"tokens"`
}

// secretProtection describes the secrets of the snapshot q reads.
func secretProtection(ctx context.Context, q querier, dl dialect) (SecretProtection, error) {
	p := SecretProtection{
		Encryption: "AES-256-GCM, exactly as stored: each object's secret is sealed with the object's id as additional data, " +
			"each secret inside a document (document_secrets, \"ep1:KEYID:…\" in place of the value) with ID#FIELD, " +
			"each system secret with system:NAME, so a ciphertext moved to another row or field does not open",
		Restore: "import needs the key(s) listed in key_ids, which this file does not contain: " + SecretKeyEnv +
			" set to them, or the source database's key file copied next to the new database; import refuses otherwise",
		Tokens:        "only SHA-256 hashes of API key and credential secrets (table tokens); no token can be recovered from this file",
		ObjectSecrets: map[string]int{},
		SystemSecrets: []string{},
	}
	all, err := allSecrets(ctx, q, dl)
	if err != nil {
		return p, err
	}
	total, ids, _ := sealedCount(all)
	p.KeyIDs = append([]string{}, ids...)
	p.DocumentSecrets = documentSecretCounts(all)
	rows, err := q.QueryContext(ctx, `SELECT o.kind, COUNT(*) FROM secrets s JOIN objects o ON o.id = s.object_id GROUP BY o.kind`)
	if err != nil {
		return p, err
	}
	for rows.Next() {
		var kind string
		var n int
		if err := rows.Scan(&kind, &n); err != nil {
			rows.Close()
			return p, err
		}
		p.ObjectSecrets[kind] = n
	}
	if err := rows.Close(); err != nil {
		return p, err
	}
	rows, err = q.QueryContext(ctx, `SELECT name FROM system_secrets ORDER BY name`)
	if err != nil {
		return p, err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return p, err
		}
		p.SystemSecrets = append(p.SystemSecrets, name)
	}
	if err := rows.Close(); err != nil {
		return p, err
	}
	p.Summary = protectionSummary(total, p, ids)
	return p, nil
}

// protectionSummary is the one-sentence Summary of a backup's secrets.
func protectionSummary(total int, p SecretProtection, ids []string) string {
	if total == 0 {
		return "no secrets; API key and credential tokens only as SHA-256 hashes"
	}
	var kinds []string
	for _, k := range sortedKeys(p.ObjectSecrets) {
		kinds = append(kinds, fmt.Sprintf("%d private key(s) of %s objects", p.ObjectSecrets[k], k))
	}
	for _, k := range sortedKeys(p.DocumentSecrets) {
		for _, f := range sortedKeys(p.DocumentSecrets[k]) {
			kinds = append(kinds, fmt.Sprintf("%d %s of %s objects", p.DocumentSecrets[k][f], f, k))
		}
	}
	for _, name := range p.SystemSecrets {
		kinds = append(kinds, "system secret "+name)
	}
	keys := "key id " + strings.Join(ids, ", ")
	if len(ids) > 1 {
		keys = "key ids " + strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%d secrets (%s), each sealed with AES-256-GCM under %s; the key is not in this file", total, strings.Join(kinds, "; "), keys)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writeSecretProtection writes the ,"secret_protection":{…} member of a backup.
func (s *Store) writeSecretProtection(ctx context.Context, q querier, bw *bufio.Writer) error {
	p, err := secretProtection(ctx, q, s.d)
	if err != nil {
		return s.classify(err)
	}
	out, err := json.Marshal(p)
	if err != nil {
		return err
	}
	bw.WriteString(",\n\"secret_protection\":")
	_, err = bw.Write(out)
	return err
}

// dataMigrations are the migrations that rewrite rows rather than the schema. A backup of an
// older schema holds rows in the old form, so a restore applies these to them after inserting
// them, in the import's transaction.
var dataMigrations = []int{5} // 0005: weighted backends' ids bkdwt_ → bkdwd_

// reapplyDataMigrations runs the data migrations newer than the backup's schema.
func (s *Store) reapplyDataMigrations(ctx context.Context, tx *wtx, backupSchema int) error {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	for _, v := range dataMigrations {
		if v <= backupSchema {
			continue
		}
		for _, f := range files {
			base := strings.TrimPrefix(f, "migrations/")
			if n, _ := strconv.Atoi(strings.SplitN(base, "_", 2)[0]); n != v {
				continue
			}
			body, err := migrations.ReadFile(f)
			if err != nil {
				return err
			}
			for _, stmt := range splitStatements(string(body)) {
				if _, err := tx.ExecContext(ctx, s.d.ddl(stmt)); err != nil {
					return fmt.Errorf("store: import: migration %s on the restored rows: %w", base, s.classify(err))
				}
			}
		}
	}
	return nil
}
