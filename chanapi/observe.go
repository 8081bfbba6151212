package chanapi

import (
	"context"
	"sync"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// Observer follows who leads the Lock called name (Lock.Watch). It is safe
// for concurrent use.
type Observer struct {
	changes chan primitives.Leadership
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once

	mu  sync.Mutex
	cur primitives.Leadership
}

// Observe starts an Observer of the Lock called name; opts are the Lock's.
// Its goroutine runs until Close. Leading comes within about one round
// trip of a grant, and LeaderNone within about one round trip of a
// release. After a holder crashed it comes by the holder's deadline,
// without relying on Redis's lazy `expired` events. LeaderUnknown comes
// when fewer than a quorum answer, at the latest by the last known
// holder's deadline. It is never LeaderNone while a quorum holds.
func Observe(c *coordinator.Coordinator, name string, opts ...primitives.Option) (*Observer, error) {
	l, err := primitives.NewLock(c, name, opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &Observer{changes: make(chan primitives.Leadership, 1), cancel: cancel}
	o.wg.Go(func() {
		_ = l.Watch(ctx, o.publish)
	})
	return o, nil
}

// publish keeps the latest state in the channel's one slot.
func (o *Observer) publish(s primitives.Leadership) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cur = s
	select {
	case <-o.changes: // an older state nobody read yet: the latest wins
	default:
	}
	o.changes <- s
}

// Changes delivers each new state. It is buffered 1 and the latest state
// wins: a reader that falls behind skips to the newest. The first state
// is the first read's. Close closes it.
func (o *Observer) Changes() <-chan primitives.Leadership { return o.changes }

// Current returns the latest state: LeaderUnknown before the first read.
func (o *Observer) Current() primitives.Leadership {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cur
}

// Close stops the observer, waits for its goroutine and closes Changes.
// It is idempotent and returns nil.
func (o *Observer) Close() error {
	o.once.Do(func() {
		o.cancel()
		o.wg.Wait()
		close(o.changes)
	})
	return nil
}
