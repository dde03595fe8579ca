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
type notifier struct {
	s    *Store
	dsn  string
	tag  string // this process's mark on its notifications, so it skips its own
	mu   sync.Mutex
	todo map[string]struct{}
	wake chan struct{}
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// notifyEvery is how long announcements wait to be sent together.
const notifyEvery = 50 * time.Millisecond

func newNotifier(s *Store, dsn string) *notifier {
	tag, _ := ep.NewID("rep")
	n := &notifier{s: s, dsn: dsn, tag: tag, todo: map[string]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	n.wg.Add(2)
	go n.send()
	go n.listen()
	return n
}

func (n *notifier) queue(account string) {
	n.mu.Lock()
	n.todo[account] = struct{}{}
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
		for a := range n.todo {
			payloads = append(payloads, n.tag+" "+a)
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
		n.s.feed.announce(AllAccounts)
	}
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		tag, account, ok := strings.Cut(msg.Payload, " ")
		if ok && tag != n.tag {
			n.s.feed.announce(account)
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
