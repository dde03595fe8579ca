package store

import "runtime"

// gather is the batching step the committer and the combiner share: it waits for the first
// request on queue, then takes whatever else is already waiting, up to max, without waiting
// for more, so a batch costs an idle server no latency and a busy one fewer round trips. It
// returns the batch (reusing batch's array) and false once stop is closed.
//
// yield lets the goroutines that are ready to run go first, before the batch is closed: on a
// busy server some of them are about to hand over a request. The committer yields (a write
// transaction is worth the wait); the combiner does not (its reads are cheap to repeat).
func gather[T any](batch []T, queue <-chan T, stop <-chan struct{}, max int, yield bool) ([]T, bool) {
	select {
	case r := <-queue:
		batch = append(batch[:0], r)
	case <-stop:
		return batch[:0], false
	}
	if yield {
		runtime.Gosched()
	}
	for len(batch) < max {
		select {
		case r := <-queue:
			batch = append(batch, r)
		default:
			return batch, true
		}
	}
	return batch, true
}
