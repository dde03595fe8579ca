package store

import (
	"context"
	"database/sql"
	"errors"

	ep "github.com/edgeplane/edgeplane"
)

// The account's traffic policy budget on write (see ep.PolicyUse): policy_costs holds each
// object's share, and a write whose share would take the account's total (each key counted
// once) past ep.MaxAccountPolicyCost is refused. The rows go with their object (ON DELETE
// CASCADE), so a deleted edge or route, or one deleted with its edge, frees its share in the
// same transaction.
const (
	policyCostsTotal = `SELECT CAST(COALESCE(SUM(c), 0) AS BIGINT) FROM
		(SELECT MAX(cost) AS c FROM policy_costs WHERE account_id = ? AND object_id <> ? GROUP BY use_key) u`
	policyCostsShared = `SELECT COUNT(*) FROM policy_costs WHERE account_id = ? AND use_key = ? AND object_id <> ?`
	policyCostsDel    = `DELETE FROM policy_costs WHERE object_id = ?`
	policyCostsIns    = `INSERT INTO policy_costs (object_id, account_id, use_key, cost) VALUES (?, ?, ?, ?)`
)

// policyUseOf is the share of the object id whose document is d, if it is one that holds a
// traffic policy (ok false otherwise, or when it has none enabled).
func policyUseOf(d ep.Document, id string) (ep.PolicyUse, bool) {
	if h, ok := d.(ep.PolicyHolder); ok {
		return h.PolicyUse(id)
	}
	return ep.PolicyUse{}, false
}

// checkPolicyBudget refuses use for the object id when the account's other objects' shares and
// it pass the budget. A key another object of the account already uses costs nothing more. On
// PostgreSQL the account's policy writers take turns (an advisory lock held to the end of the
// transaction), so two writes cannot each see room the other takes; SQLite has one writer.
func (s *Store) checkPolicyBudget(ctx context.Context, tx *wtx, account, id string, use ep.PolicyUse) error {
	if q := s.d.serialLock(); q != "" {
		if _, err := tx.ExecContext(ctx, s.d.rebind(q), "traffic_policy|"+account); err != nil {
			return s.classify(err)
		}
	}
	var shared int
	if err := tx.QueryRowContext(ctx, s.d.rebind(policyCostsShared), account, use.Key, id).Scan(&shared); err != nil {
		return s.classify(err)
	}
	if shared > 0 {
		return nil
	}
	var others int64
	if err := tx.QueryRowContext(ctx, s.d.rebind(policyCostsTotal), account, id).Scan(&others); err != nil {
		return s.classify(err)
	}
	if others+int64(use.Cost) > ep.MaxAccountPolicyCost {
		return ep.PolicyOverBudget(use.Cost, int(others))
	}
	return nil
}

// writePolicyUse records the object's share (after its row is written), replacing any it had.
func (s *Store) writePolicyUse(ctx context.Context, tx *wtx, account, id string, use ep.PolicyUse, has, replace bool) error {
	if replace {
		if _, err := tx.ExecContext(ctx, s.d.rebind(policyCostsDel), id); err != nil {
			return s.classify(err)
		}
	}
	if !has {
		return nil
	}
	_, err := tx.ExecContext(ctx, s.d.rebind(policyCostsIns), id, account, use.Key, use.Cost)
	return s.classify(err)
}

// fillPolicyCostsTask is the store task migration 0018 leaves: record the shares of the objects
// written before policy_costs existed.
const fillPolicyCostsTask = "fill-policy-costs"

// policyKinds are the kinds whose documents hold a traffic policy (ep.PolicyHolder).
var policyKinds = []*ep.Resource{ep.HTTPSEdgeRoutes, ep.TLSEdges, ep.TCPEdges}

// fillPolicyCosts runs fillPolicyCostsTask once, in one transaction: every object of a policy
// kind with an enabled traffic policy and no share gets its share, whatever the total (what is
// stored is kept; the budget holds for the writes that follow, and the routing plan applies it
// meanwhile).
func (s *Store) fillPolicyCosts(ctx context.Context) error {
	var one int
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT 1 FROM store_tasks WHERE name = ?`), fillPolicyCostsTask).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return s.classify(err)
	}
	return s.tryTxOnce(ctx, func(ctx context.Context, tx *wtx) error {
		out, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM store_tasks WHERE name = ?`), fillPolicyCostsTask)
		if err != nil {
			return s.classify(err)
		}
		if n, err := out.RowsAffected(); err != nil || n == 0 {
			return s.classify(err)
		}
		return s.recordPolicyShares(ctx, tx)
	})
}

// recordPolicyShares gives every object of a policy kind with an enabled traffic policy and no
// share its share, whatever the account's total: for objects written before shares were kept,
// and those a backup's import brings (a backup holds no shares: they are derived).
func (s *Store) recordPolicyShares(ctx context.Context, tx *wtx) error {
	for _, res := range policyKinds {
		rows, err := tx.QueryContext(ctx, s.d.rebind(`SELECT id, account_id, doc FROM objects WHERE kind = ?
			AND NOT EXISTS (SELECT 1 FROM policy_costs p WHERE p.object_id = objects.id)`), res.Kind)
		if err != nil {
			return s.classify(err)
		}
		type share struct {
			id, account string
			use         ep.PolicyUse
		}
		var shares []share
		for rows.Next() {
			var id, account string
			var body []byte
			if err := rows.Scan(&id, &account, &body); err != nil {
				rows.Close()
				return s.classify(err)
			}
			d, err := decode(res, body)
			if err != nil {
				rows.Close()
				return err
			}
			if use, ok := policyUseOf(d, id); ok {
				shares = append(shares, share{id, account, use})
			}
		}
		if err := rows.Close(); err != nil {
			return s.classify(err)
		}
		if err := rows.Err(); err != nil {
			return s.classify(err)
		}
		for _, sh := range shares {
			if err := s.writePolicyUse(ctx, tx, sh.account, sh.id, sh.use, true, false); err != nil {
				return err
			}
		}
	}
	return nil
}
