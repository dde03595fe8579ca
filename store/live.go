package store

import (
	"context"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// complete fills in what a document shows beyond its own row: the children it embeds (an HTTPS
// edge's routes), and its links to what is online (a tunnel-group backend's matching tunnels, a
// tunnel's backends), and readies the secrets inside documents for an API response (present:
// the shown ones opened, the hidden ones null). Every read and write path that returns documents
// ends here.
func (s *Store) complete(ctx context.Context, account string, res *ep.Resource, docs ...ep.Document) error {
	if err := s.embed(ctx, res, docs...); err != nil {
		return err
	}
	if err := s.present(res, docs...); err != nil { // secrets inside documents (docsecrets.go)
		return err
	}
	if len(docs) == 0 || (res != ep.TunnelGroupBackends && res != ep.Tunnels) {
		return nil
	}
	switch res {
	case ep.TunnelGroupBackends:
		tunnels, err := s.onlineLabeled(ctx, account)
		if err != nil {
			return err
		}
		for _, d := range docs {
			b := d.(*ep.TunnelGroupBackend)
			b.Tunnels = []*ep.Ref{}
			for _, t := range tunnels {
				if ep.LabelsMatch(t.Labels, b.Labels) {
					b.Tunnels = append(b.Tunnels, ep.NewRef(t.ID))
				}
			}
		}
	case ep.Tunnels:
		backends, err := s.accountObjects(ctx, account, ep.TunnelGroupBackends)
		if err != nil {
			return err
		}
		for _, d := range docs {
			t := d.(*ep.Tunnel)
			t.Backends = []ep.Ref{}
			if len(t.Labels) == 0 {
				continue
			}
			for _, bd := range backends {
				if b := bd.(*ep.TunnelGroupBackend); ep.LabelsMatch(t.Labels, b.Labels) {
					t.Backends = append(t.Backends, ep.Ref{ID: b.ID})
				}
			}
		}
	}
	return nil
}

// onlineLabeled returns the account's online labeled tunnels, oldest first.
func (s *Store) onlineLabeled(ctx context.Context, account string) ([]*ep.Tunnel, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT t.doc FROM agent_tunnels t JOIN agent_sessions s ON s.id = t.session_id
		JOIN agent_replicas r ON r.replica = s.replica WHERE t.account_id = ? AND r.seen_at >= ? ORDER BY t.id`), account, ep.FormatTime(time.Now().Add(-LiveTolerance)))
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []*ep.Tunnel
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, s.classify(err)
		}
		d, err := decode(ep.Tunnels, body)
		if err != nil {
			return nil, err
		}
		if t := d.(*ep.Tunnel); len(t.Labels) > 0 {
			out = append(out, t)
		}
	}
	return out, s.classify(rows.Err())
}

// accountObjects returns every object of a collection of the account, oldest first.
func (s *Store) accountObjects(ctx context.Context, account string, res *ep.Resource) ([]ep.Document, error) {
	rows, err := s.r.QueryContext(ctx, s.d.rebind(`SELECT doc FROM objects WHERE account_id = ? AND kind = ? ORDER BY id`), account, res.Kind)
	if err != nil {
		return nil, s.classify(err)
	}
	defer rows.Close()
	var out []ep.Document
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, s.classify(err)
		}
		d, err := decode(res, body)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, s.classify(rows.Err())
}
