package store

import (
	"context"
	"time"

	ep "github.com/edgeplane/edgeplane"
)

// CountAgentTunnels returns how many tunnels the account has online on every replica: the rows
// of live replicas' sessions, as /tunnels lists them. The agent gateway bounds an account's
// binds with it (through the agent_tunnels_account index, one row read per tunnel), so that
// an account's agents spread over replicas cannot hold more than one replica would let them.
func (s *Store) CountAgentTunnels(ctx context.Context, account string) (int, error) {
	var n int
	fresh := ep.FormatTime(time.Now().Add(-LiveTolerance))
	err := s.r.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM agent_tunnels t
		JOIN agent_sessions s ON s.id = t.session_id JOIN agent_replicas r ON r.replica = s.replica
		WHERE t.account_id = ? AND r.seen_at >= ?`), account, fresh).Scan(&n)
	if err != nil {
		return 0, s.classify(err)
	}
	return n, nil
}
