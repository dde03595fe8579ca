package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// CountChildren counts the account's objects of collection res under the parent with the id, for
// the limits on how many children one object may have (ep.MaxRoutesPerEdge,
// ep.MaxRulesPerIPPolicy). On PostgreSQL it first locks the parent's row FOR UPDATE, so that two
// creates under one parent take turns and the second counts the first's child: without it both
// could find room for the last one. SQLite has one writer and needs no lock. The count runs as a
// statement prepared on SQLite's writer connection: parsing it on every create was about a
// seventh of a rule create's CPU time; and SQLite's read cache keeps the counts it has seen.
func (v *txView) CountChildren(res *ep.Resource, parentID string) (int, error) {
	if v.s.d.forUpdate() != "" {
		var locked string
		err := v.tx.QueryRowContext(v.ctx, v.s.q.parentLocked, parentID, v.account).Scan(&locked)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, ep.NotFound() // deleted while we looked
		}
		if err != nil {
			return 0, v.s.classify(err)
		}
	}
	// On SQLite the read cache may hold the count from the state the transaction started in
	// (readcache_counts.go): the count walks every child, and this is the committer's serial path.
	key := childKey{parentID, v.account, res.Kind}
	if n, ok := v.tx.ws.count(key); ok {
		return n, nil
	}
	var n int
	err := v.tx.QueryRowContext(v.ctx, v.s.q.children, parentID, v.account, res.Kind).Scan(&n)
	if err != nil {
		return 0, v.s.classify(err)
	}
	v.tx.ws.fillCount(key, n)
	return n, nil
}

// boundPage ends a page early when what it would show passes ep.MaxPageBytes, so that one list
// response is bounded like one GET: 100 objects of the largest size a request body allows, or 100
// HTTPS edges with all their routes, could otherwise be a hundred times the largest object. Each
// object is counted as its stored document, its embedded children's, and ep.RenderSlack for
// itself and each child; the first object is always shown. sizes are the stored documents'
// sizes; a page ended early has more after it.
func (s *Store) boundPage(ctx context.Context, res *ep.Resource, docs []ep.Document, sizes []int, more bool) ([]ep.Document, bool, error) {
	if len(docs) < 2 {
		return docs, more, nil
	}
	var children map[string]int64
	if res.Embeds != nil {
		var err error
		if children, err = s.childBytes(ctx, res, docs); err != nil {
			return nil, false, err
		}
	}
	var total int64
	for i, d := range docs {
		total += int64(sizes[i]) + ep.RenderSlack + children[d.Base().ID]
		if i > 0 && total > ep.MaxPageBytes {
			return docs[:i], true, nil
		}
	}
	return docs, more, nil
}

// childBytes counts, for each document, its embedded children's stored bytes and ep.RenderSlack
// per child.
func (s *Store) childBytes(ctx context.Context, res *ep.Resource, docs []ep.Document) (map[string]int64, error) {
	args := make([]any, 0, len(docs)+1)
	args = append(args, res.Embeds.Kind)
	for _, d := range docs {
		args = append(args, d.Base().ID)
	}
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT parent_id, count(*), sum(octet_length(doc)) FROM objects
		WHERE kind = ? AND parent_id IN (?`+strings.Repeat(", ?", len(docs)-1)+`) GROUP BY parent_id`), args...)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	children := make(map[string]int64, len(docs))
	for rows.Next() {
		var (
			parent  string
			n, size int64
		)
		if err := rows.Scan(&parent, &n, &size); err != nil {
			return nil, s.classify(err)
		}
		children[parent] = size + n*ep.RenderSlack
	}
	return children, s.classify(rows.Err())
}
