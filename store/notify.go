package store

import (
	"context"
	"strings"
	"sync"
	"time"

	ep "github.com/edgeplane/edgeplane"
	"github.com/jackc/pgx/v5"
)

// notifier carries the change feed between replicas sharing a PostgreSQL database. Writes queue
// their account; a goroutine sends the queued accounts every notifyEvery with one pg_notify
// statement, off every request's path. Another goroutine LISTENs on a connection of its own and
// announces what other replicas sent; when that connection is lost, it announces AllAccounts
// once it is back, since notifications may have been missed meanwhile.
//
// A notification's payload is "<tag> <account>" for a change of a collection a routing plan reads,
// and "<tag> <account> agents" for a change only online agents depend on (a credential), so other
// replicas' planners do not rebuild for it.
type notifier struct {
	s    *Store
	dsn  string
	tag  string // this process's mark on its notifications, so it skips its own
	mu   sync.Mutex
	todo map[string]bool // account → a plan collection changed
	wake chan struct{}
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// agentsOnly marks a notification of a change that only the agent gateway needs.
const agentsOnly = "agents"

// notifyEvery is how long announcements wait to be sent together.
const notifyEvery = 50 * time.Millisecond

func newNotifier(s *Store, dsn string) *notifier {
	tag, _ := ep.NewID("rep")
	n := &notifier{s: s, dsn: dsn, tag: tag, todo: map[string]bool{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	n.wg.Add(2)
	go n.send()
	go n.listen()
	return n
}

func (n *notifier) queue(account string, plan bool) {
	n.mu.Lock()
	n.todo[account] = n.todo[account] || plan
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) send() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.wake:
		}
		select { // gather a burst
		case <-n.stop:
			return
		case <-time.After(notifyEvery):
		}
		n.mu.Lock()
		payloads := make([]string, 0, len(n.todo))
		for a, plan := range n.todo {
			if plan {
				payloads = append(payloads, n.tag+" "+a)
			} else {
				payloads = append(payloads, n.tag+" "+a+" "+agentsOnly)
			}
		}
		clear(n.todo)
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.s.w.ExecContext(ctx, `SELECT pg_notify('`+notifyChannel+`', p) FROM unnest($1::text[]) AS p`, payloads)
		cancel()
		if err != nil { // the other replicas' periodic rebuild makes up for it
			continue
		}
	}
}

func (n *notifier) listen() {
	defer n.wg.Done()
	missed := false
	for {
		err := n.listenOnce(missed)
		select {
		case <-n.stop:
			return
		case <-time.After(time.Second):
		}
		missed = err != nil
	}
}

// listenOnce holds one LISTEN connection until it fails or the store closes.
func (n *notifier) listenOnce(missed bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := pgx.Connect(ctx, n.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	if missed {
		n.s.feed.announce(AllAccounts, true)
	}
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		tag, rest, ok := strings.Cut(msg.Payload, " ")
		account, what, _ := strings.Cut(rest, " ")
		if ok && tag != n.tag {
			n.s.feed.announce(account, what != agentsOnly)
		}
	}
}

func (n *notifier) close() {
	if n == nil {
		return
	}
	n.once.Do(func() { close(n.stop) })
	n.wg.Wait()
}
