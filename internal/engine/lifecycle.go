package engine

import (
	"context"
	"sync"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// counter counts work in flight and tells when none is left.
type counter struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while waiting for nobody
}

func (w *counter) add() {
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
}

func (w *counter) done() {
	w.mu.Lock()
	if w.n--; w.n == 0 && w.zero != nil {
		close(w.zero)
		w.zero = nil
	}
	w.mu.Unlock()
}

// wait returns once nothing is in flight, or after d.
func (w *counter) wait(d time.Duration) {
	w.mu.Lock()
	if w.n <= 0 {
		w.mu.Unlock()
		return
	}
	if w.zero == nil {
		w.zero = make(chan struct{})
	}
	z := w.zero
	w.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-z:
	case <-t.C:
	}
}

// Bind returns ctx ended also by Close (with cause ErrClosed), for a call
// that blocks: Close wakes it and waits for it to return (bounded). The
// caller must call stop when it returns. It fails with ErrClosed once
// Close has started.
func (c *Engine) Bind(ctx context.Context) (bound context.Context, stop func(), err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, nodeactor.ErrClosed
	}
	c.calls.add()
	c.mu.Unlock()
	bctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(c.closing, func() { cancel(nodeactor.ErrClosed) })
	return bctx, func() {
		unhook()
		cancel(context.Canceled)
		c.calls.done()
	}, nil
}

// urgentLate wraps late for an urgent round's abandoned requests: each is
// counted in flight until its reply arrives, so Close can wait for it.
func (c *Engine) urgentLate(late func(nodeactor.Reply)) func(nodeactor.Reply) {
	if late == nil {
		return c.flightDone // releases and renewals: no closure per round
	}
	return func(rep nodeactor.Reply) {
		late(rep)
		c.flight.done()
	}
}

// sendTracked queues an urgent request on node i without waiting for its
// reply; Close waits for it (bounded).
func (c *Engine) sendTracked(i int, req nodeactor.Request) {
	t := &nodeactor.Ticket{Late: c.flightDone}
	t.Abandon()
	req.Ticket = t
	c.flight.add()
	if c.nodes[i].TrySend(req) != nil {
		c.flight.done()
	}
}
