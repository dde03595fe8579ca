package console

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	ep "github.com/edgeplane/edgeplane"
)

// The account's pages: each reads the API with the signed-in key.

// overviewData is the overview page.
type overviewData struct {
	Sessions     []*ep.TunnelSession
	Tunnels      []*ep.Tunnel
	EdgeCounts   [3]int // HTTPS, TLS, TCP
	Domains      []domainRow
	Credentials  []*ep.Credential
	More         bool
	Traffic      bool
	TrafficCount int
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	var d overviewData
	var more [7]bool
	var err error
	if d.Sessions, more[0], err = listAll[*ep.TunnelSession](ctx, h, s, ep.TunnelSessions); err != nil {
		return err
	}
	if d.Tunnels, more[1], err = listAll[*ep.Tunnel](ctx, h, s, ep.Tunnels); err != nil {
		return err
	}
	for i, res := range []*ep.Resource{ep.HTTPSEdges, ep.TLSEdges, ep.TCPEdges} {
		var edges []json.RawMessage
		if edges, more[2+i], err = listAll[json.RawMessage](ctx, h, s, res); err != nil {
			return err
		}
		d.EdgeCounts[i] = len(edges)
	}
	domains, moreDomains, err := listAll[*ep.ReservedDomain](ctx, h, s, ep.ReservedDomains)
	if err != nil {
		return err
	}
	d.Domains = domainRows(domains)
	if d.Credentials, more[5], err = listAll[*ep.Credential](ctx, h, s, ep.Credentials); err != nil {
		return err
	}
	d.More = slices.Contains(more[:], true) || moreDomains
	if h.cfg.Traffic != nil {
		d.Traffic = true
		d.TrafficCount = len(h.cfg.Traffic.List(s.caller.AccountID, noFilter, 0, h.cfg.Entries))
	}
	h.render(w, r, s, "overview", http.StatusOK, d)
	return nil
}

// agentRow is an agent session with its tunnels.
type agentRow struct {
	*ep.TunnelSession
	Tunnels []*ep.Tunnel
}

func (h *Handler) agents(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	sessions, more, err := listAll[*ep.TunnelSession](ctx, h, s, ep.TunnelSessions)
	if err != nil {
		return err
	}
	tunnels, moreTunnels, err := listAll[*ep.Tunnel](ctx, h, s, ep.Tunnels)
	if err != nil {
		return err
	}
	rows := make([]agentRow, len(sessions))
	index := map[string]int{}
	for i, ts := range sessions {
		rows[i] = agentRow{TunnelSession: ts}
		index[ts.ID] = i
	}
	for _, t := range tunnels {
		if t.TunnelSession == nil {
			continue
		}
		if i, ok := index[t.TunnelSession.ID]; ok {
			rows[i].Tunnels = append(rows[i].Tunnels, t)
		}
	}
	h.render(w, r, s, "agents", http.StatusOK, struct {
		Agents []agentRow
		More   bool
	}{rows, more || moreTunnels})
	return nil
}

// command sends the stop or restart command to an agent session, through the API.
func (h *Handler) command(w http.ResponseWriter, r *http.Request, s *session) error {
	id, command := r.PathValue("id"), r.PathValue("command")
	if command != ep.CommandStop && command != ep.CommandRestart {
		return notFound("The console sends the stop and restart commands only.")
	}
	if !plainID(id) {
		return notFound("No agent session has that id.")
	}
	if err := h.call(r.Context(), s, "POST", ep.TunnelSessions.Path+"/"+id+"/"+command, struct{}{}, nil); err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"agents?done="+command, http.StatusSeeOther)
	return nil
}

// plainID reports whether id can be an object's id: letters, digits and underscores, so that it
// is one path segment of an API call.
func plainID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// domainRow is a reserved domain with its certificate's status in words.
type domainRow struct {
	*ep.ReservedDomain
	Cert    string
	Problem bool
}

func domainRows(domains []*ep.ReservedDomain) []domainRow {
	rows := make([]domainRow, len(domains))
	for i, d := range domains {
		rows[i] = domainRow{ReservedDomain: d}
		row := &rows[i]
		st := d.CertificateManagementStatus
		switch {
		case st != nil && st.ProvisioningJob != nil && st.ProvisioningJob.ErrorCode != nil:
			row.Cert, row.Problem = "failing: "+*st.ProvisioningJob.ErrorCode+" "+st.ProvisioningJob.Msg, true
		case st != nil && st.ProvisioningJob != nil:
			row.Cert = "being issued: " + st.ProvisioningJob.Msg
		case d.CertificateManagementPolicy != nil && d.Certificate != nil && st != nil && st.RenewsAt != nil:
			row.Cert = "managed (" + d.CertificateManagementPolicy.Authority + "), renews at " + *st.RenewsAt
		case d.CertificateManagementPolicy != nil:
			row.Cert = "managed (" + d.CertificateManagementPolicy.Authority + "), not issued yet"
		case d.Certificate != nil:
			row.Cert = "uploaded certificate " + d.Certificate.ID
		default:
			row.Cert = "edgeplane's own CA"
		}
	}
	return rows
}

func (h *Handler) domains(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	domains, more, err := listAll[*ep.ReservedDomain](ctx, h, s, ep.ReservedDomains)
	if err != nil {
		return err
	}
	addrs, moreAddrs, err := listAll[*ep.ReservedAddr](ctx, h, s, ep.ReservedAddrs)
	if err != nil {
		return err
	}
	h.render(w, r, s, "domains", http.StatusOK, struct {
		Domains []domainRow
		Addrs   []*ep.ReservedAddr
		More    bool
	}{domainRows(domains), addrs, more || moreAddrs})
	return nil
}

// backendCollections are the five kinds of backends.
var backendCollections = []*ep.Resource{ep.TunnelGroupBackends, ep.StaticBackends, ep.HTTPResponseBackends,
	ep.FailoverBackends, ep.WeightedBackends}

// backendIndex reads every backend of the account, by id, for the edges page.
func (h *Handler) backendIndex(ctx context.Context, s *session) (map[string]backendRow, bool, error) {
	out := map[string]backendRow{}
	anyMore := false
	for _, res := range backendCollections {
		items, more, err := listAll[map[string]any](ctx, h, s, res)
		if err != nil {
			return nil, false, err
		}
		anyMore = anyMore || more
		for _, b := range items {
			id, _ := b["id"].(string)
			out[id] = backendRow{ID: id, Kind: strings.TrimSuffix(res.Kind, "_backend"), Summary: backendSummary(b)}
		}
	}
	return out, anyMore, nil
}
