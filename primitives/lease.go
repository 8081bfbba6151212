package primitives

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/engine"
	"github.com/sourcegraph/conc/panics"
)

// Lease is a held primitive: auto-renewed, fenced, with a Lost channel that
// closes by its Deadline, before anyone else could acquire. Every primitive's
// Acquire returns one. It is safe for concurrent use.
type Lease struct {
	h      *engine.Hold
	ctxSet sync.Once
	ctx    context.Context // h's Context, carrying the lease for Heartbeat(ctx); made on first use
}

// wrap returns the Lease of a fresh hold (nil for nil, with err unchanged).
func wrap(h *engine.Hold, err error) (*Lease, error) {
	if h == nil {
		return nil, err
	}
	return newLease(h), err
}

func newLease(h *engine.Hold) *Lease {
	return &Lease{h: h}
}

// leaseKey is the context key under which a lease's Context (and Do's
// ctx) carry the lease.
type leaseKey struct{}

// Heartbeat records that the holder is making progress; with
// WithHeartbeat(d) renewals continue only while it is called at least every
// d. It is cheap: call it from the work loop.
func (l *Lease) Heartbeat() {
	if l != nil {
		l.h.Heartbeat()
	}
}

// Heartbeat calls Heartbeat on the lease that ctx carries: the lease's
// Context, Do's ctx, or a context derived from either. It reports whether
// ctx carried one.
func Heartbeat(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	if ok {
		l.Heartbeat()
	}
	return ok
}

// Keys returns the resource names the lease covers.
func (l *Lease) Keys() []string { return l.h.Keys() }

// Token returns the lease's 128-bit random token (hex), unique per
// acquisition. It is a capability: whoever knows it can release or extend
// the lease; never log it whole.
func (l *Lease) Token() string { return l.h.Token() }

// Fence returns the fencing token: it strictly increases across successive
// exclusive acquisitions of a resource, and fits in an int64. Pass it to the
// store the lock protects and have the store reject smaller ones.
func (l *Lease) Fence() uint64 { return l.h.Fence() }

// Deadline returns the end of guaranteed validity on the monotonic clock;
// it moves on each confirmed renewal and always falls before the keys expire
// on the servers.
func (l *Lease) Deadline() time.Time { return l.h.Deadline() }

// Valid reports whether the lease is held and now is before Deadline. It is
// local and cheap; check it (or use the fence) before acting on the resource.
func (l *Lease) Valid() bool { return l != nil && l.h.Valid() }

// Lost returns a channel closed when the lease is lost: its Deadline passed
// without a confirmed renewal, or a quorum reported another owner. It is
// closed by the Deadline while the process runs, and never by Release.
func (l *Lease) Lost() <-chan struct{} { return l.h.Lost() }

// Done returns a channel closed when the lease ends for any reason: by
// Release (before any node is asked to free it, so work under Context
// stops before the next holder starts), by loss (just before Lost is
// closed), or by Coordinator.Close. The lease closes it; nobody else may.
func (l *Lease) Done() <-chan struct{} { return l.h.Done() }

// Err returns nil while held; then ErrReleased or ErrLeaseLost (wrapping the
// cause; both wrap ErrClosed when Coordinator.Close ended the lease).
func (l *Lease) Err() error {
	if l == nil {
		return errNilLease("Err")
	}
	return l.h.Err()
}

// Context returns a context cancelled when Done closes, with Err as its
// cause: run the work the lease protects under it. Its Err, Done and Value
// read the Deadline first: once it has passed they end the lease as lost,
// so a process resumed after a freeze (SIGSTOP, a stopped VM, a long GC)
// finds Err non-nil at once, before the renewal timer has run. Check
// ctx.Err() (or Valid) before each side effect. A context derived from it
// is cancelled when the lease's Done closes: by then, for a frozen
// process, within a few ms of the resume.
func (l *Lease) Context() context.Context {
	l.ctxSet.Do(func() { l.ctx = &leaseCtx{Context: context.WithValue(l.h.Context(), leaseKey{}, l), h: l.h} })
	return l.ctx
}

// leaseCtx is a lease's Context, or Do's: its methods first end the hold if
// its Deadline has passed (engine.Hold.Expire).
type leaseCtx struct {
	context.Context
	h *engine.Hold
	// cancel, in Do's ctx, cancels Context with the hold's cause once the
	// hold ended; nil in Lease.Context, which the hold cancels itself.
	cancel context.CancelCauseFunc
}

// expire ends the hold if its Deadline has passed, and then Context.
func (c *leaseCtx) expire() {
	c.h.Expire()
	if c.cancel != nil {
		if hc := c.h.Context(); hc.Err() != nil {
			c.cancel(context.Cause(hc))
		}
	}
}

func (c *leaseCtx) Done() <-chan struct{} {
	c.expire()
	return c.Context.Done()
}

func (c *leaseCtx) Err() error {
	c.expire()
	return c.Context.Err()
}

func (c *leaseCtx) Value(key any) any {
	c.expire()
	return c.Context.Value(key)
}

// Extend renews the lease on the nodes now with ttl (ttl > 0, within the
// TTL bounds): it succeeds iff a quorum confirms the token within the
// current validity. The new Deadline is the start of Extend + ttl − drift;
// a key's TTL is never shortened; ttl becomes the TTL of later renewals. A
// minority failure returns an error without losing the lease; a quorum
// reporting another owner loses it (ErrLeaseLost).
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return errNilLease("Extend")
	}
	if err := checkCtx(ctx, "Lease.Extend"); err != nil {
		return err
	}
	return l.h.Extend(ctx, ttl)
}

// Release deletes the lease's keys on every node that answers. It runs with
// context.WithoutCancel(ctx) and a bounded timeout, so a deferred Release
// after the request's ctx ended still deletes the keys. It returns nil when
// a quorum confirmed (and nil again on a second call), an error wrapping the
// per-node errors otherwise (the rest expire by TTL), ErrLeaseLost if the
// lease had been lost, and ErrClosed if Coordinator.Close released it. A
// node where the key is missing confirms. A Lock lease whose nodes hold
// another holder's key on more than N−Q nodes was overtaken: Release
// returns an error that Is ErrLeaseLost (logged and counted once).
// A nil ctx is a bug: the lease is still released (with
// context.Background()), and the error wraps ErrInvalidArgument.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return errNilLease("Release")
	}
	if err := checkCtx(ctx, "Lease.Release"); err != nil {
		if rerr := l.h.Release(context.Background()); rerr != nil {
			return errors.Join(err, rerr)
		}
		return fmt.Errorf("%w (released with context.Background())", err)
	}
	return l.h.Release(ctx)
}

// errNilLease is the error of a method called on a nil *Lease.
func errNilLease(method string) error {
	return engine.Invalid("Lease.%s on a nil *Lease (a failed acquire returns nil: check its error first)", method)
}

// Locker is implemented by *Lock, *FairLock, *MultiLock and *Semaphore.
type Locker interface {
	// Acquire blocks until held; on ctx done it returns an error that Is
	// ctx.Err(), and also ErrNotAcquired (a *NotAcquiredError) when the
	// name was held at the last attempt.
	Acquire(ctx context.Context) (*Lease, error)
	// TryAcquire makes one attempt.
	TryAcquire(ctx context.Context) (*Lease, error)
}

// Do acquires l, runs fn under the lease's Context (cancelled if the lease is
// lost; like Lease.Context, its Err reads the Deadline) and always releases. It returns fn's error, or the acquire error, or
// the release error when fn succeeded. A panic in fn is recovered and
// returned as an error (with the panic's value and stack) after the lease
// was released: a crashing job does not keep its lock until the TTL.
func Do(ctx context.Context, l Locker, fn func(ctx context.Context) error) (err error) {
	if err := checkDo("Do", ctx, l, fn); err != nil {
		return err
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	return runHeld(ctx, "Do", lease, fn)
}

// TryDo is Do with one attempt: it calls TryAcquire, and if that wins runs
// fn under the lease's Context and always releases. While another holder
// has l it returns an error that Is ErrNotAcquired and fn does not run. It
// returns fn's error, or the acquire error, or the release error when fn
// succeeded; a panic in fn is recovered as in Do.
func TryDo(ctx context.Context, l Locker, fn func(ctx context.Context) error) error {
	if err := checkDo("TryDo", ctx, l, fn); err != nil {
		return err
	}
	lease, err := l.TryAcquire(ctx)
	if err != nil {
		return err
	}
	return runHeld(ctx, "TryDo", lease, fn)
}

// checkDo validates Do's and TryDo's arguments.
func checkDo(name string, ctx context.Context, l Locker, fn func(ctx context.Context) error) error {
	switch {
	case ctx == nil:
		return engine.Invalid("%s: nil ctx (use context.Background())", name)
	case l == nil:
		return engine.Invalid("%s: nil Locker (pass a *Lock, *FairLock, *MultiLock, *Semaphore or an RWLock side)", name)
	case fn == nil:
		return engine.Invalid("%s: nil func", name)
	}
	return nil
}

// runHeld runs fn under lease (see Do) and always releases it.
func runHeld(ctx context.Context, name string, lease *Lease, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if rerr := lease.Release(ctx); err == nil && rerr != nil {
			err = rerr
		}
	}()
	wctx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, lease))
	defer cancel(nil)
	stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	defer stop()
	var pc panics.Catcher
	pc.Try(func() { err = fn(&leaseCtx{Context: wctx, h: lease.h, cancel: cancel}) })
	if r := pc.Recovered(); r != nil {
		return fmt.Errorf("redlock: %s: the function panicked: %w", name, r.AsError())
	}
	return err
}
