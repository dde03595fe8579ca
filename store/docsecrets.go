package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// Secrets inside documents: module secrets the data plane needs in the clear (webhook secrets,
// OAuth and OIDC client secrets) are fields of a route's JSON. A document type declares them
// (ep.SecretsOf); this file seals them with the store's sealer before a document is written, so
// the database, its WAL and every backup hold them only as "ep1:" ciphertexts bound to the object
// id and the field (fieldAD), and opens them where they are used. The rest of the store never sees
// a module: it calls these functions on documents of any collection.
//
// A document in memory holds its secrets sealed, as stored, except inside Update's function (which
// sees them opened, so a module PUT can keep a stored client secret) and in the data plane's
// snapshot (opened). Before a document goes back to an API client, present opens the secrets the
// API shows and redacts the hidden ones.

// fieldAD is the additional data a secret inside a document is sealed with: the object's id and
// the field's path, which differs from every object id (the "secrets" table's additional data)
// and from "system:NAME", so no ciphertext opens in another place.
func fieldAD(id, field string) string { return id + "#" + field }

// sealFields seals the secrets of d, a document of res, in place: what Create and Update write.
func (s *Store) sealFields(res *ep.Resource, d ep.Document) error {
	id := d.Base().ID
	for _, sec := range ep.SecretsOf(res, d) {
		sealed, err := s.seal.seal(fieldAD(id, sec.Field), sec.Value)
		if err != nil {
			return err
		}
		sec.Set(sealed)
	}
	return nil
}

// openFields opens the sealed secrets of d in place, every one of them: for Update's function
// and for the data plane.
func (s *Store) openFields(res *ep.Resource, d ep.Document) error {
	id := d.Base().ID
	for _, sec := range ep.SecretsOf(res, d) {
		plain, err := s.seal.open(fieldAD(id, sec.Field), sec.Value)
		if err != nil {
			return fmt.Errorf("%s %s %s: %w", res.Kind, id, sec.Field, err)
		}
		sec.Set(plain)
	}
	return nil
}

// present readies documents of res read from the store for an API response: the secrets the API
// returns are opened, the hidden ones set to null. The routes an HTTPS edge shows get the same.
func (s *Store) present(res *ep.Resource, docs ...ep.Document) error {
	if !ep.HoldsSecrets(res) && (res.Embeds == nil || !ep.HoldsSecrets(res.Embeds)) {
		return nil
	}
	for _, d := range docs {
		id := d.Base().ID
		for _, sec := range ep.SecretsOf(res, d) {
			if sec.Hidden {
				sec.Set("")
				continue
			}
			plain, err := s.seal.open(fieldAD(id, sec.Field), sec.Value)
			if err != nil {
				return fmt.Errorf("%s %s %s: %w", res.Kind, id, sec.Field, err)
			}
			sec.Set(plain)
		}
		if e, ok := d.(ep.Embedder); ok && res.Embeds != nil {
			if err := s.present(res.Embeds, e.Children()...); err != nil {
				return err
			}
		}
	}
	return nil
}

// fieldSecrets reads every secret kept in documents, sealed as stored, in (kind, id) order, for
// the start-up check, the counts of a backup and the check of an import. A document's secret
// appears as table "objects" and key "<id> <field>".
func fieldSecrets(ctx context.Context, q querier, dl dialect) ([]storedSecret, error) {
	var out []storedSecret
	err := eachSecretDoc(ctx, q, dl, func(res *ep.Resource, id string, d ep.Document) error {
		for _, sec := range ep.SecretsOf(res, d) {
			out = append(out, storedSecret{table: "objects", key: id + " " + sec.Field, ad: fieldAD(id, sec.Field), sealed: sec.Value, kind: res.Kind, field: sec.Field})
		}
		return nil
	})
	return out, err
}

// docPage is how many documents eachSecretDoc reads per query, so memory stays bounded however
// many routes there are.
const docPage = 200

// eachSecretDoc calls fn with every stored document of the collections that can hold secrets,
// decoded, its secrets as stored, page by page in id order.
func eachSecretDoc(ctx context.Context, q querier, dl dialect, fn func(res *ep.Resource, id string, d ep.Document) error) error {
	query := dl.rebind(`SELECT id, doc FROM objects WHERE kind = ? AND id > ? ORDER BY id LIMIT ?`)
	for _, res := range ep.SecretCollections() {
		after := ""
		for {
			rows, err := q.QueryContext(ctx, query, res.Kind, after, docPage)
			if err != nil {
				return err
			}
			type item struct {
				id  string
				doc []byte
			}
			var page []item
			for rows.Next() {
				var it item
				if err := rows.Scan(&it.id, &it.doc); err != nil {
					rows.Close()
					return err
				}
				page = append(page, it)
			}
			if err := rows.Close(); err != nil {
				return err
			}
			for _, it := range page {
				d, err := decode(res, it.doc)
				if err != nil {
					return err
				}
				if err := fn(res, it.id, d); err != nil {
					return err
				}
			}
			if len(page) < docPage {
				break
			}
			after = page[len(page)-1].id
		}
	}
	return nil
}

// rewriteFields re-seals the secrets inside every document with the first key (rotation), or,
// with plainOnly, seals those still in plaintext and leaves sealed ones alone (the documents of
// a database or a backup from before document secrets were sealed). It writes only documents it
// changed and returns how many secrets it sealed. Nothing is written when one does not open: the
// caller's transaction fails.
func (s *Store) rewriteFields(ctx context.Context, tx *wtx, plainOnly bool) (int, error) {
	type rewrite struct {
		id   string
		body []byte
	}
	var (
		n       int
		pending []rewrite
	)
	flush := func() error {
		for _, r := range pending {
			if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE objects SET doc = ?, version = version + 1 WHERE id = ?`), r.body, r.id); err != nil {
				return s.classify(err)
			}
		}
		pending = pending[:0]
		return nil
	}
	err := eachSecretDoc(ctx, tx, s.d, func(res *ep.Resource, id string, d ep.Document) error {
		changed := false
		for _, sec := range ep.SecretsOf(res, d) {
			plain := sec.Value
			if plainOnly {
				if strings.HasPrefix(sec.Value, sealPrefix) {
					continue // sealed already; the start-up check opens it
				}
			} else {
				var err error
				if plain, err = s.seal.open(fieldAD(id, sec.Field), sec.Value); err != nil {
					return fmt.Errorf("objects %s %s: %w", id, sec.Field, err)
				}
			}
			sealed, err := s.seal.seal(fieldAD(id, sec.Field), plain)
			if err != nil {
				return err
			}
			sec.Set(sealed)
			changed = true
			n++
		}
		if !changed {
			return nil
		}
		body, err := storedJSON(d)
		if err != nil {
			return err
		}
		pending = append(pending, rewrite{id, body})
		if len(pending) >= docPage {
			return flush()
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, flush()
}

// docSecretsSchema is the schema version from which secrets inside documents are sealed
// (migration 0009); a backup of an older schema holds them in plaintext.
const docSecretsSchema = 9

// sealPlainTask names the task migration 0009 leaves for the first start after it: sealing the
// document secrets an older edgeplane stored in plaintext.
const sealPlainTask = "seal-document-secrets"

// runPendingTasks does, once, what the migrations left for code to do (with the keys, or with
// ep.TrafficPolicyCost: fillPolicyCosts); OpenWith calls it once the sealer is known. Replicas
// starting together each try: the delete of the task row decides which one does it (the other
// waits on the row, then finds it gone).
func (s *Store) runPendingTasks(ctx context.Context) error {
	if err := s.fillPolicyCosts(ctx); err != nil {
		return fmt.Errorf("record the traffic policies' shares: %w", err)
	}
	if err := s.sealPlainSecrets(ctx); err != nil {
		return fmt.Errorf("seal document secrets: %w", err)
	}
	return nil
}

// sealPlainSecrets runs sealPlainTask once.
func (s *Store) sealPlainSecrets(ctx context.Context) error {
	var one int
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT 1 FROM store_tasks WHERE name = ?`), sealPlainTask).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // done before: no write transaction at every start
	}
	if err != nil {
		return s.classify(err)
	}
	return s.tryTxOnce(ctx, func(ctx context.Context, tx *wtx) error {
		out, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM store_tasks WHERE name = ?`), sealPlainTask)
		if err != nil {
			return s.classify(err)
		}
		if n, err := out.RowsAffected(); err != nil || n == 0 {
			return s.classify(err)
		}
		_, err = s.rewriteFields(ctx, tx, true)
		return err
	})
}

// documentSecretCounts counts the secrets kept in documents by the objects' kind and the field,
// for a backup's secret_protection.
func documentSecretCounts(all []storedSecret) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, sec := range all {
		if sec.table != "objects" {
			continue
		}
		if out[sec.kind] == nil {
			out[sec.kind] = map[string]int{}
		}
		out[sec.kind][sec.field]++
	}
	return out
}
