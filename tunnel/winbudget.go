package tunnel

import "sync"

// WindowBudget is the process-wide allowance of bytes beyond agentWindow that proxy streams'
// windows may hold at once. Every grown stream reserves its window's excess before granting it
// and returns it as the public client reads, so edgeplane never holds more than this beyond the
// base windows, whatever the number of slow clients.
//
// The budget is shared between accounts, not first come first served: an account may hold at
// most limit/(n+1) of it, where n is the number of accounts holding some (itself included).
// Many fast downloads of one account therefore never take the growth another account's
// streams need: whatever one account does, a share as large as its own stays free for an
// account that starts downloading, which takes it at once, and the accounts already holding
// more than their new share shrink to it (tune) as their clients read. One account alone may
// use half the budget; two, a third each; and so on.
type WindowBudget struct {
	mu          sync.Mutex
	limit, used int64
	// held is what each account holds now; an account holding nothing has no entry, so the map
	// is bounded by the accounts with a grown stream open.
	held map[string]int64
	// peak and peakAccount are the most the budget and any one account ever held at once.
	peak, peakAccount int64
}

// NewWindowBudget returns a budget of limit bytes; with limit 0 no stream grows.
func NewWindowBudget(limit int64) *WindowBudget {
	return &WindowBudget{limit: max(limit, 0), held: map[string]int64{}}
}

// shareLocked is the most one account may hold while holders accounts (itself included) hold
// some of the budget; mu is held.
func (b *WindowBudget) shareLocked(holders int) int64 { return b.limit / int64(holders+1) }

// reserve takes up to want bytes for account and returns how many it took.
func (b *WindowBudget) reserve(account string, want int64) int64 {
	if b == nil || want <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	held, holding := b.held[account]
	holders := len(b.held)
	if !holding {
		holders++
	}
	got := min(want, b.limit-b.used, b.shareLocked(holders)-held)
	if got <= 0 {
		return 0
	}
	b.used += got
	b.held[account] = held + got
	b.peak = max(b.peak, b.used)
	b.peakAccount = max(b.peakAccount, held+got)
	return got
}

// release returns n bytes account reserved.
func (b *WindowBudget) release(account string, n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if left := b.held[account] - n; left > 0 {
		b.held[account] = left
	} else {
		delete(b.held, account)
	}
	b.mu.Unlock()
}

// over reports how much more than its share account holds now (0 when within it): the
// accounts' shares fall as more accounts hold some, and those above theirs give the excess back.
func (b *WindowBudget) over(account string) int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	held, ok := b.held[account]
	if !ok {
		return 0
	}
	return max(held-b.shareLocked(len(b.held)), 0)
}

// WindowBudgetStats is a budget's use, for metrics and tests.
type WindowBudgetStats struct {
	// Limit is the budget; Used what all streams hold now; Accounts how many accounts hold some.
	Limit, Used int64
	Accounts    int
	// Peak and PeakAccount are the most the budget, and any one account, ever held at once.
	Peak, PeakAccount int64
}

// Stats reports the budget's use now and its peaks.
func (b *WindowBudget) Stats() WindowBudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return WindowBudgetStats{Limit: b.limit, Used: b.used, Accounts: len(b.held), Peak: b.peak, PeakAccount: b.peakAccount}
}

// Used reports the bytes reserved now (for tests and metrics).
func (b *WindowBudget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// heldBy reports what account holds now (for tests).
func (b *WindowBudget) heldBy(account string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[account]
}

// WindowBudget reports the use of the gateway's proxy window budget; ok is false when the
// budget is 0 (no stream grows).
func (g *Gateway) WindowBudget() (st WindowBudgetStats, ok bool) {
	if g.windows == nil {
		return WindowBudgetStats{}, false
	}
	return g.windows.Stats(), true
}
