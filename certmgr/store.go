package certmgr

import (
	"context"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/edgeplane/edgeplane/store"
)

// Store is what the certificate manager needs of the store: the domains it manages and their
// reserved-domain documents, the leases and state of its jobs (shared by the replicas, so one
// replica runs each job), the certificates it issues, its ACME account key, and the feed of
// changes. *store.Store implements it.
type Store interface {
	ManagedDomains(ctx context.Context) ([]store.ManagedDomain, error)
	Subscribe() *store.Subscription
	Get(ctx context.Context, account string, res *ep.Resource, parentID, id string) (ep.Document, error)
	Create(ctx context.Context, caller ep.Caller, res *ep.Resource, parentID string, c ep.Creator) (ep.Document, error)
	Update(ctx context.Context, caller ep.Caller, res *ep.Resource, parentID, id string, fn func(op *ep.Op, doc ep.Document) error) (ep.Document, error)
	Delete(ctx context.Context, caller ep.Caller, res *ep.Resource, parentID, id string) error

	ACMELeases(ctx context.Context) ([]store.ACMELease, error)
	AcquireACMELease(ctx context.Context, account, domainID, host, holder string, ttl time.Duration) (job store.ACMEJob, ok bool, err error)
	ReleaseACMELease(ctx context.Context, domainID, holder string) error
	UpdateACMEJob(ctx context.Context, domainID, holder string, ttl time.Duration, set func(j *store.ACMEJobUpdate)) error
	DeleteACMEJob(ctx context.Context, domainID string) error
	SystemSecret(ctx context.Context, name string, mint func() (public, private string, err error)) (public, private string, err error)
}

// AnswerStore is what the public listeners' challenge answers read: the answers of the jobs
// any replica runs.
type AnswerStore interface {
	ACMEChallenge(ctx context.Context, host, token string) (keyAuth string, ok bool, err error)
	ACMEKeyAuth(ctx context.Context, host string) (keyAuth string, ok bool, err error)
	ACMEDNSChallenge(ctx context.Context, name string) (keyAuth string, ok bool, err error)
}

var (
	_ Store       = (*store.Store)(nil)
	_ AnswerStore = (*store.Store)(nil)
)
