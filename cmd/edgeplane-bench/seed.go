package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// account is one account of the benchmark database, with an admin API key and an IP policy whose
// rules the scenarios read, list, update and create.
type account struct {
	caller ep.Caller
	token  string
	policy string
	// rules are the ids of the rules seeded into the account (all of them for a small account,
	// an evenly spread sample for a large one).
	rules []string
}

// dataset is the seeded database of one engine.
type dataset struct {
	small, large, writes account
	smallN, largeN       int
	// writePolicies are the policies of the writes account that the create scenarios fill
	// (writes.go).
	writePolicies []string
}

// ruleCreate is the create body of the i-th seeded rule.
func ruleCreate(policy string, i int) *ep.IPPolicyRuleCreate {
	cidr := fmt.Sprintf("10.%d.%d.%d/32", i>>16&255, i>>8&255, i&255)
	action := "allow"
	if i%2 == 1 {
		action = "deny"
	}
	desc := fmt.Sprintf("seeded rule %d", i)
	return &ep.IPPolicyRuleCreate{AnnotationFields: ep.AnnotationFields{Description: &desc},
		CIDR: &cidr, IPPolicyID: &policy, Action: &action}
}

// seededRow is the objects row of the i-th seeded rule with the given id and creation time,
// built the way the store builds one: the document the create rules produce, with id and
// created_at set and uris empty. verifySeed checks it against a row the store wrote.
func seededRow(policy string, i int, id string, created time.Time) (doc []byte, createdAt string, err error) {
	body := ruleCreate(policy, i)
	if err := body.Validate(); err != nil {
		return nil, "", err
	}
	r := &ep.IPPolicyRule{CIDR: *body.CIDR, IPPolicy: ep.NewRef(policy), Action: *body.Action}
	body.ApplyTo(&r.Annotations)
	r.ID, r.CreatedAt = id, ep.FormatTime(created)
	doc, err = json.Marshal(r)
	return doc, r.CreatedAt, err
}

// seed creates the accounts, keys and policies through the store, then adds the rules directly
// with multi-row INSERTs: seeding a million objects through HTTP would take far longer than the
// benchmark itself. A rule created through the store is compared column by column with the row
// the seeding code builds for it first, so the seeded rows are exactly what the store writes.
func seed(ctx context.Context, dsn string, smallN, largeN int, logf func(string, ...any)) (*dataset, error) {
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	ds := &dataset{smallN: smallN, largeN: largeN}
	for _, a := range []struct {
		name string
		dst  *account
	}{{"bench-small", &ds.small}, {"bench-large", &ds.large}, {"bench-writes", &ds.writes}} {
		admin, _, err := st.EnsureAccount(ctx, a.name)
		if err != nil {
			st.Close()
			return nil, err
		}
		key, err := st.Create(ctx, admin, ep.APIKeys, "", &ep.APIKeyCreate{})
		if err != nil {
			st.Close()
			return nil, err
		}
		desc := "benchmark policy"
		pol, err := st.Create(ctx, admin, ep.IPPolicies, "", &ep.IPPolicyCreate{AnnotationFields: ep.AnnotationFields{Description: &desc}})
		if err != nil {
			st.Close()
			return nil, err
		}
		*a.dst = account{caller: admin, token: *key.(*ep.APIKey).Token, policy: pol.Base().ID}
	}
	if err := seedWritePolicies(ctx, st, ds); err != nil {
		st.Close()
		return nil, err
	}
	// The reference rule, written by the store.
	refBody := ruleCreate(ds.writes.policy, 7)
	if err := refBody.Validate(); err != nil {
		st.Close()
		return nil, err
	}
	ref, err := st.Create(ctx, ds.writes.caller, ep.IPPolicyRules, "", refBody)
	st.Close()
	if err != nil {
		return nil, err
	}

	db, err := openRaw(dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := verifySeed(ctx, db, dsn, ds.writes, ref.Base().ID); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if ds.small.rules, err = bulkRules(ctx, db, dsn, ds.small, smallN, 1000); err != nil {
		return nil, err
	}
	if ds.large.rules, err = bulkRules(ctx, db, dsn, ds.large, largeN, 1000); err != nil {
		return nil, err
	}
	if store.IsPostgres(dsn) {
		// What autovacuum does after a bulk load, so the planner knows the table's size.
		if _, err := db.ExecContext(ctx, `ANALYZE objects`); err != nil {
			return nil, err
		}
	} else if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return nil, err
	}
	logf("seeded %d + %d rules in %s", smallN, largeN, time.Since(t0).Round(time.Millisecond))
	return ds, nil
}

// openRaw opens the benchmark database with database/sql directly, for seeding and checks.
func openRaw(dsn string) (*sql.DB, error) {
	if store.IsPostgres(dsn) {
		return sql.Open("pgx", dsn)
	}
	v := url.Values{}
	v.Add("_pragma", "busy_timeout(10000)")
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "synchronous(OFF)") // seeding only: the benchmark starts over if it fails
	db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(dsn, "sqlite:")+"?"+v.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

func rebind(dsn, q string) string {
	if !store.IsPostgres(dsn) {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// verifySeed compares the row the store wrote for the reference rule with the row the seeding
// code builds for the same input, id and time, and checks that the store wrote nothing for it in
// the side tables (which seeding does not touch).
func verifySeed(ctx context.Context, db *sql.DB, dsn string, a account, id string) error {
	var (
		gotID, acct, kind, createdAt, doc string
		parent                            sql.NullString
		version                           int64
	)
	err := db.QueryRowContext(ctx, rebind(dsn, `SELECT id, account_id, kind, parent_id, version, created_at, doc FROM objects WHERE id = ?`), id).
		Scan(&gotID, &acct, &kind, &parent, &version, &createdAt, &doc)
	if err != nil {
		return fmt.Errorf("read the reference rule: %w", err)
	}
	ksuid := id[strings.IndexByte(id, '_')+1:]
	created, err := time.Parse(ep.TimeFormat, createdAt)
	if err != nil {
		return err
	}
	want, wantCreated, err := seededRow(a.policy, 7, id, created)
	if err != nil {
		return err
	}
	switch {
	case acct != a.caller.AccountID || kind != ep.IPPolicyRules.Kind || parent.String != a.policy || version != 1:
		return fmt.Errorf("seeding would write other columns than the store: store wrote account %s kind %s parent %s version %d", acct, kind, parent.String, version)
	case createdAt != wantCreated || !strings.HasPrefix(id, ep.IPPolicyRules.Prefix+"_") || len(ksuid) != 27:
		return fmt.Errorf("seeding would write another id or created_at than the store: %s %s", id, createdAt)
	case !bytes.Equal([]byte(doc), want):
		return fmt.Errorf("seeding would write another document than the store:\nstore: %s\nseed:  %s", doc, want)
	}
	for _, side := range []string{"tokens WHERE object_id", "refs WHERE from_id", "claims WHERE object_id", "secrets WHERE object_id"} {
		var n int
		if err := db.QueryRowContext(ctx, rebind(dsn, "SELECT COUNT(*) FROM "+side+" = ?"), id).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("the store wrote %d rows into %s for a rule; seeding must write them too", n, side)
		}
	}
	return nil
}

// bulkRules inserts n rules into the account's policy, in transactions of many multi-row
// INSERTs, and returns the ids of up to sampleN of them, evenly spread.
func bulkRules(ctx context.Context, db *sql.DB, dsn string, a account, n, sampleN int) ([]string, error) {
	const rowsPerStmt = 500
	const stmtsPerTx = 40
	row := "(?, ?, ?, ?, 1, ?, ?)"
	full := rebind(dsn, `INSERT INTO objects (id, account_id, kind, parent_id, version, created_at, doc) VALUES `+
		strings.Repeat(row+", ", rowsPerStmt-1)+row)
	step := max(1, n/sampleN)
	var sample []string
	args := make([]any, 0, 6*rowsPerStmt)
	for done := 0; done < n; {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		for s := 0; s < stmtsPerTx && done < n; s++ {
			k := min(rowsPerStmt, n-done)
			args = args[:0]
			for j := range k {
				i := done + j
				id, created := ep.NewID(ep.IPPolicyRules.Prefix)
				doc, createdAt, err := seededRow(a.policy, i, id, created)
				if err != nil {
					tx.Rollback()
					return nil, err
				}
				if i%step == 0 && len(sample) < sampleN {
					sample = append(sample, id)
				}
				args = append(args, id, a.caller.AccountID, ep.IPPolicyRules.Kind, a.policy, createdAt, string(doc))
			}
			q := full
			if k < rowsPerStmt {
				q = rebind(dsn, `INSERT INTO objects (id, account_id, kind, parent_id, version, created_at, doc) VALUES `+
					strings.Repeat(row+", ", k-1)+row)
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				tx.Rollback()
				return nil, err
			}
			done += k
		}
		if err := tx.Commit(); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if len(sample) == 0 && n > 0 {
		return nil, errors.New("no rules sampled")
	}
	return sample, nil
}
