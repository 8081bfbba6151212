package primitives

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redlock-go/redlock/coordinator"
)

// recheckCap bounds how long a notified waiter sleeps without a message: a
// safety re-check in case a push was lost or a handed-over waiter died.
const recheckCap = time.Second

// waitLoop is the blocking acquire shared by the exclusive primitives. The
// first attempt goes out at once (no subscription cost when uncontended);
// on refusal, in WaitNotify mode the waiter registers with the router and
// waits for the subscription before the attempt that may fail again, then
// sleeps until a message for it, the holder's remaining TTL (capped), or ctx.
// Split votes back off with jitter. On ctx end leave() removes the waiter's
// queue entry on every node.
func waitLoop(ctx context.Context, c *coordinator.Coordinator, topics []string, token string,
	try func(enqueue bool) attemptResult, leave func()) (*Lease, error) {
	return waitLoopFrom(ctx, c, topics, token, try, leave, false)
}

// waitLoopFrom is waitLoop; with queued it skips the first attempt without
// a subscription and queues at once (for a caller that expects contention,
// e.g. a client that just handed the lock to a waiter: that attempt would
// only be refused by the reservation, costing a round on every node while
// the handoff is in flight).
func waitLoopFrom(ctx context.Context, c *coordinator.Coordinator, topics []string, token string,
	try func(enqueue bool) attemptResult, leave func(), queued bool) (*Lease, error) {
	refused := time.Now()
	if !queued || c.Config().WaitStrategy != coordinator.WaitNotify {
		res := try(false)
		if res.lease != nil || !retryable(res.err) {
			return res.lease, res.err
		}
		refused = time.Now()
	}
	defer func() {
		c.Instruments().WaitTime.Record(context.Background(), time.Since(refused).Seconds())
	}()
	cfg := c.Config()
	notify := cfg.WaitStrategy == coordinator.WaitNotify
	var wake <-chan struct{}
	if notify {
		w := c.Router().RegisterAll(token, topics...)
		defer w.Close()
		wake = w.C()
		t := time.NewTimer(2 * cfg.NodeTimeout)
		select {
		case <-w.Ready():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	// Once an attempt failed the waiter may hold queue entries (a first try
	// of some primitives enqueues too): leave on every way out but success,
	// and once more after NodeTimeout, when an attempt that was still in
	// flight (and may enqueue again) has been executed or dropped.
	if leave != nil {
		once := leave
		leave = func() {
			once()
			c.Later(cfg.NodeTimeout+10*time.Millisecond, once)
		}
	} else {
		leave = func() {}
	}
	backoff := cfg.RetryDelay
	for {
		if err := ctx.Err(); err != nil {
			leave()
			return nil, fmt.Errorf("redlock: acquire %v: %w", topics, err)
		}
		res := try(notify)
		if res.lease != nil {
			return res.lease, nil
		}
		if !retryable(res.err) {
			leave()
			return nil, res.err
		}
		var d time.Duration
		w := wake // nil in polling mode: never fires
		if !notify || res.split || !errors.Is(res.err, coordinator.ErrNotAcquired) {
			// Split vote or lost quorum: back off with jitter so contenders
			// converge; our own rollback's message must not wake us early.
			d = jitter(backoff)
			backoff = min(2*backoff, cfg.MaxRetryDelay)
			w = nil
		} else {
			backoff = cfg.RetryDelay
			d = recheckCap // a message wakes us; the timer is the safety net
			if res.hint > 0 {
				d = min(res.hint+time.Millisecond, recheckCap)
			}
		}
		t := time.NewTimer(d)
		select {
		case <-w:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

func retryable(err error) bool {
	return errors.Is(err, coordinator.ErrNotAcquired) || errors.Is(err, coordinator.ErrQuorumUnavailable)
}

// jitter returns a random duration in [d/2, 3d/2).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}
