package chanapi

import (
	"context"
	"errors"
	"sync"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// LatchWatcher waits for a CountDownLatch in its own goroutine and closes
// Opened() when the count reaches zero, so callers can select on it next to
// their other events. It is safe for concurrent use.
type LatchWatcher struct {
	opened chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu  sync.Mutex
	err error
}

// Latch starts watching l. The watcher's one goroutine runs l.Wait until the
// latch opens, a fatal error stops it (see Err), or Close.
func Latch(l *primitives.CountDownLatch) (*LatchWatcher, error) {
	if l == nil {
		return nil, errors.Join(coordinator.ErrInvalidArgument, errors.New("redlock: Latch needs a CountDownLatch"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &LatchWatcher{opened: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	w.wg.Go(func() {
		defer close(w.done)
		err := l.Wait(ctx)
		switch {
		case err == nil:
			close(w.opened)
		case ctx.Err() == nil:
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
		}
	})
	return w, nil
}

// Opened returns a channel closed when the latch's count reaches zero. It
// is never closed if the watcher stopped first (Close or a fatal error).
func (w *LatchWatcher) Opened() <-chan struct{} { return w.opened }

// Done returns a channel closed when the watcher's goroutine has ended:
// the latch opened, a fatal error stopped it, or Close.
func (w *LatchWatcher) Done() <-chan struct{} { return w.done }

// Err returns the fatal error that stopped the watcher (ErrWrongType, a
// count mismatch wrapping ErrInvalidArgument, ErrClosed, ...); nil while it
// runs, after the latch opened, and after Close.
func (w *LatchWatcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close stops watching and waits for the goroutine to end. It is
// idempotent and returns nil.
func (w *LatchWatcher) Close() error {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
	return nil
}
