package tunnel

import (
	"context"
	"time"

	"github.com/edgeplane/edgeplane/store"
)

// Store is what the gateway needs of the store, and no more: agents' credentials and the
// names they claim, the rows of every replica's sessions and tunnels, the commands the API
// queues for agents, and the feed of the changes online agents depend on. *store.Store
// implements it; the gateway depends on this set so that what it reads and writes is listed in
// one place.
type Store interface {
	AuthenticateAgent(ctx context.Context, selector, secret string) (store.AgentCredential, error)
	CredentialStates(ctx context.Context, ids []string) (map[string]store.CredentialState, error)
	LiveObjects(ctx context.Context, ids []string) (map[string]bool, error)
	ClaimHolder(ctx context.Context, namespace, value string) (account, objectID string, found bool, err error)
	ClaimHolders(ctx context.Context, namespace string, values []string) (map[string]string, error)
	SubscribeAgents() *store.Subscription

	PutAgentSession(ctx context.Context, r store.AgentSessionRow) (store.Takeover, error)
	DropKeptTunnels(ctx context.Context, sessionID, conn string, gen int64) error
	RestoreAgentSession(ctx context.Context, r store.AgentSessionRow) (ours bool, err error)
	DeleteAgentSession(ctx context.Context, id, conn string) error
	ReplicaSessions(ctx context.Context, replica string) ([]string, error)
	TouchAgentSessions(ctx context.Context, replica string, staleBefore time.Time, orphans bool) error
	PutAgentTunnel(ctx context.Context, r store.AgentTunnelRow) error
	DeleteAgentTunnel(ctx context.Context, id, sessionID, conn string) error
	CountAgentTunnels(ctx context.Context, account string) (int, error)

	PendingAgentCommands(ctx context.Context, replica string) ([]store.AgentCommand, error)
	FinishAgentCommand(ctx context.Context, id, outcome string) error

	AnnounceReplica(ctx context.Context, replica, peerAddr string) error
	DirectoryStore
}

var _ Store = (*store.Store)(nil)
