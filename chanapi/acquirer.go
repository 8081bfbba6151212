package chanapi

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// Acquirer runs a campaign loop: acquire, hand the lease over on Acquired(),
// wait until that lease ends, then try again. It is safe for concurrent use.
type Acquirer struct {
	l        primitives.Locker
	acquired chan *primitives.Lease
	errs     chan error
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	once     sync.Once

	mu  sync.Mutex
	err error
}

// Lock returns an Acquirer campaigning for the Lock called name.
func Lock(c *coordinator.Coordinator, name string, opts ...primitives.Option) (*Acquirer, error) {
	l, err := primitives.NewLock(c, name, opts...)
	if err != nil {
		return nil, err
	}
	return Campaign(l), nil
}

// Campaign returns an Acquirer campaigning for any Locker. A nil Locker
// gives an Acquirer that has already stopped with an error wrapping
// ErrInvalidArgument (see Err).
func Campaign(l primitives.Locker) *Acquirer {
	if l == nil || reflect.ValueOf(l).Kind() == reflect.Pointer && reflect.ValueOf(l).IsNil() {
		a := &Acquirer{acquired: make(chan *primitives.Lease), errs: make(chan error, 1), cancel: func() {},
			err: fmt.Errorf("%w: nil Locker", primitives.ErrInvalidArgument)}
		close(a.acquired)
		close(a.errs)
		return a
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Acquirer{
		l:        l,
		acquired: make(chan *primitives.Lease),
		errs:     make(chan error, 1),
		ctx:      ctx,
		cancel:   cancel,
	}
	a.wg.Go(a.run)
	return a
}

// Acquired yields a lease each time one is acquired. The channel is
// unbuffered. The loop acquires first, then holds the lease (renewed) until
// someone receives it. A lease lost before it was received is not sent.
// Close releases one not yet received. After a received lease ends the loop
// tries again, so a caller that wants to stop campaigning calls Close before
// releasing its lease. The lease belongs to the receiver, who releases it.
// Closed by the Acquirer's goroutine after Close or a fatal error.
func (a *Acquirer) Acquired() <-chan *primitives.Lease { return a.acquired }

// Errors yields non-fatal errors while trying (for example a lost quorum);
// an error is dropped when nobody reads it. Closed together with Acquired.
func (a *Acquirer) Errors() <-chan error { return a.errs }

// Err returns the fatal cause once the loop has stopped by itself (for
// example ErrWrongType or ErrClosed), and nil after Close or while running.
func (a *Acquirer) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Close stops trying, releases a lease that was acquired but not yet handed
// over, then closes Acquired() and Errors(). A lease already received stays
// the caller's. It is idempotent and returns nil.
//
// An acquire attempt already on its way to a node when Close is called may
// still be granted there. That grant is rolled back when its reply comes,
// after Close returned: the lock can look taken for that moment (a round
// trip; the attempt's TTL if the reply never comes). A TryAcquire right
// after Close may be refused then; an Acquire waits it out.
func (a *Acquirer) Close() error {
	a.once.Do(func() {
		a.cancel()
		a.wg.Wait()
	})
	return nil
}

func fatal(err error) bool {
	return errors.Is(err, coordinator.ErrWrongType) || errors.Is(err, coordinator.ErrInvalidArgument) ||
		errors.Is(err, coordinator.ErrClosed)
}

// run is the campaign loop; it is the only sender on (and closer of) the
// two channels.
func (a *Acquirer) run() {
	defer close(a.errs)
	defer close(a.acquired)
	backoff := 10 * time.Millisecond
	for {
		lease, err := a.l.Acquire(a.ctx)
		if err != nil {
			if a.ctx.Err() != nil {
				return
			}
			if fatal(err) {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
				return
			}
			select {
			case a.errs <- err:
			default: // nobody is reading: drop it
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-a.ctx.Done():
				t.Stop()
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		select {
		case a.acquired <- lease:
			select {
			case <-lease.Done():
				// Done closes before the release round is sent: wait for
				// that round (a no-op for a lost lease), so that the next
				// campaign queues behind the waiter it hands the lock to.
				_ = lease.Release(context.Background())
			case <-a.ctx.Done():
				return
			}
		case <-lease.Done():
			// Ended (lost, or released by Coordinator.Close) before anyone
			// received it: not sent. Campaign again (or stop, if closed).
		case <-a.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = lease.Release(ctx)
			cancel()
			return
		}
	}
}

// MultiLock returns an Acquirer campaigning for all of names at once.
func MultiLock(c *coordinator.Coordinator, names []string, opts ...primitives.Option) (*Acquirer, error) {
	m, err := primitives.NewMultiLock(c, names, opts...)
	if err != nil {
		return nil, err
	}
	return Campaign(m), nil
}
