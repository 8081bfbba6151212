package primitives

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/sourcegraph/conc/panics"
)

// Lease is a held primitive: auto-renewed, fenced, with a Lost channel that
// closes by its Deadline. See coordinator.Hold for every method's contract.
// It is safe for concurrent use.
type Lease = coordinator.Hold

// Locker is implemented by *Lock, *FairLock, *MultiLock and *Semaphore.
type Locker interface {
	// Acquire blocks until held; on ctx done it returns an error that Is ctx.Err().
	Acquire(ctx context.Context) (*Lease, error)
	// TryAcquire makes one attempt.
	TryAcquire(ctx context.Context) (*Lease, error)
}

// Do acquires l, runs fn under the lease's Context (cancelled if the lease is
// lost) and always releases. It returns fn's error, or the acquire error, or
// the release error when fn succeeded. A panic in fn is recovered and
// returned as an error (with the panic's value and stack) after the lease
// was released: a crashing job does not keep its lock until the TTL.
func Do(ctx context.Context, l Locker, fn func(ctx context.Context) error) (err error) {
	if l == nil || fn == nil {
		return errors.Join(ErrInvalidArgument, errors.New("redlock: Do needs a Locker and a func"))
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if rerr := lease.Release(ctx); err == nil && rerr != nil {
			err = rerr
		}
	}()
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	defer stop()
	var pc panics.Catcher
	pc.Try(func() { err = fn(wctx) })
	if r := pc.Recovered(); r != nil {
		return fmt.Errorf("redlock: Do: the function panicked: %w", r.AsError())
	}
	return err
}

// newToken returns 128 random bits from crypto/rand, hex encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand doc)
	return hex.EncodeToString(b[:])
}

var _ = coordinator.ErrClosed
