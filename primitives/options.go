package primitives

import (
	"fmt"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
)

// Option configures a primitive. Options are validated by the constructor.
type Option func(*options) error

type options struct {
	set       engine.Settings // the coordinator's, read once at construction
	ttl       time.Duration
	autoRenew bool
	maxHold   time.Duration
	heartbeat time.Duration
	owner     string
	ownerSet  bool
	label     string        // the holder's label (WithLabel; not CountDownLatch)
	lockDelay time.Duration // Lock, FairLock: a lost lease's keys outlive its TTL by this much
	minHold   time.Duration // Lock, FairLock: the name stays held this long from a grant

	waiterTimeout time.Duration // FairLock only
	resize        bool          // Semaphore only
}

// WithTTL sets the key TTL of each hold (100ms..24h, and above the
// coordinator's NodeTimeout); the default is the coordinator's DefaultTTL.
func WithTTL(d time.Duration) Option {
	return func(o *options) error {
		if err := coordinator.ValidateTTL(d); err != nil {
			return err
		}
		o.ttl = d
		return nil
	}
}

// WithAutoRenew turns automatic renewal on (the default) or off. Without it
// the lease is lost at its Deadline unless extended.
func WithAutoRenew(on bool) Option {
	return func(o *options) error { o.autoRenew = on; return nil }
}

// WithMaxHold stops auto-renewal once the lease has been held for d.
func WithMaxHold(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: max hold %s must be positive", ErrInvalidArgument, d)
		}
		o.maxHold = d
		return nil
	}
}

// WithHeartbeat ties auto-renewal to the holder's progress: the lease is
// renewed only while the holder calls Lease.Heartbeat (or Heartbeat with the
// lease's Context, or Extend) at least every d. A holder that is alive but
// wedged — a deadlocked goroutine, stuck I/O — stops heartbeating, and its
// lease runs out at its Deadline like any other loss: Lost closes and Err
// wraps ErrLeaseLost and ErrNoHeartbeat. A heartbeat after a skipped
// renewal but before the Deadline resumes the renewals. d must be
// positive. Pick it above the longest pause between two steps of the work.
// A lease can outlive the last heartbeat by up to d plus one TTL.
// It composes with WithMaxHold (renewal stops at whichever comes first)
// and needs auto-renewal on.
func WithHeartbeat(d time.Duration) Option {
	return durationOption("heartbeat", d, func(o *options) { o.heartbeat = d })
}

// WithLockDelay keeps a Lock's or FairLock's name blocked for d after a
// lease is lost rather than released: a holder that crashed, was cut off,
// or stopped renewing. The lock's keys live TTL + d on the servers, while
// the lease's validity (its Deadline) still counts only TTL. Meanwhile a
// late write of the lost holder, still in flight, lands before anyone
// else holds the name: a store that cannot check fences is safe for d.
// An explicit Release frees the name at once. The cost: after a crash
// nobody gets the name for TTL + d. d lies in (0, 24h]; other primitives
// reject it with ErrInvalidArgument.
func WithLockDelay(d time.Duration) Option {
	return durationOption("lock delay", d, func(o *options) { o.lockDelay = d })
}

// WithMinHold keeps a Lock's or FairLock's name held at least d from each
// grant, measured by each node's clock, even when the lease is released
// earlier: "at most once per period" for a job that several schedulers
// fire. A Release within d leaves the keys as a tail that expires d after
// the grant; nobody is granted or handed the lock before then, and the
// next holder's fence is higher as always. A lease lost within d also
// keeps the name until then. ForceRelease ends a tail at once. The
// lease's validity and renewals are unchanged (d may exceed the TTL). d
// lies in (0, 24h]; other primitives reject it with ErrInvalidArgument.
func WithMinHold(d time.Duration) Option {
	return durationOption("min hold", d, func(o *options) { o.minHold = d })
}

// keyTTL is the TTL a lease's keys are set with: its TTL plus the lock
// delay.
func (o *options) keyTTL(ttl time.Duration) time.Duration { return ttl + o.lockDelay }

// keyLife is how long a grant's keys may live from the grant: the key TTL,
// or the min-hold tail when longer. The node guard's horizon covers it.
func (o *options) keyLife() time.Duration { return max(o.keyTTL(o.ttl), o.minHold) }

// durationOption sets a duration d (called what in errors) that must lie
// in (0, coordinator.MaxTTL].
func durationOption(what string, d time.Duration, set func(*options)) Option {
	return func(o *options) error {
		if d <= 0 || d > coordinator.MaxTTL {
			return fmt.Errorf("%w: %s %s out of range (0, %s]", ErrInvalidArgument, what, d, coordinator.MaxTTL)
		}
		set(o)
		return nil
	}
}

// WithOwner makes a Lock or FairLock reentrant for one logical owner: an
// Acquire by the same owner id succeeds at once while the owner holds it.
// Each hold has its own expiry and shares the epoch's fence; the lock frees
// when every hold is released or expired. Two processes using one id share
// the lock by design. Other primitives reject it with ErrInvalidArgument.
func WithOwner(id string) Option {
	return func(o *options) error {
		if id == "" || len(id) > coordinator.MaxNameLen {
			return fmt.Errorf("%w: owner id must be 1..%d bytes", ErrInvalidArgument, coordinator.MaxNameLen)
		}
		o.owner, o.ownerSet = id, true
		return nil
	}
}

// engineOf returns the engine behind coord, or nil for a nil coord.
func engineOf(coord *coordinator.Coordinator) *engine.Engine {
	if coord == nil {
		return nil
	}
	return engine.Of(coord)
}

func buildOptions(c *engine.Engine, opts []Option) (options, error) {
	if c == nil {
		return options{}, fmt.Errorf("%w: nil coordinator", ErrInvalidArgument)
	}
	set := c.Settings()
	o := options{set: set, ttl: set.DefaultTTL, autoRenew: true}
	if len(opts) > 0 {
		// the options write to a copy: o itself does not escape, so a
		// primitive made with none costs no allocation here
		p := new(options)
		*p = o
		for _, opt := range opts {
			if opt == nil {
				return *p, fmt.Errorf("%w: nil option", ErrInvalidArgument)
			}
			if err := opt(p); err != nil {
				return *p, err
			}
		}
		o = *p
	}
	if set.MaxTTL > 0 && o.ttl > set.MaxTTL {
		return o, fmt.Errorf("%w: TTL %s exceeds the coordinator's MaxTTL %s", ErrInvalidArgument, o.ttl, set.MaxTTL)
	}
	if nt := set.NodeTimeout; o.ttl <= nt {
		return o, fmt.Errorf("%w: TTL %s must exceed the coordinator's NodeTimeout %s (one slow node would outlive the lease)",
			ErrInvalidArgument, o.ttl, nt)
	}
	if o.heartbeat > 0 && !o.autoRenew {
		return o, fmt.Errorf("%w: WithHeartbeat needs auto-renewal (WithAutoRenew(false) was given)", ErrInvalidArgument)
	}
	return o, nil
}

// primitive kinds, for the options only some of them take
type kind int

const (
	kindLock kind = iota
	kindFairLock
	kindMultiLock
	kindRWLock
	kindSemaphore
	kindLatch
)

// kindOptions builds and validates the options of a primitive of kind k,
// rejecting options meant for other kinds (errors wrap ErrInvalidArgument).
func kindOptions(c *engine.Engine, opts []Option, k kind) (options, error) {
	o, err := buildOptions(c, opts)
	if err != nil {
		return o, err
	}
	switch {
	case o.ownerSet && k != kindLock && k != kindFairLock:
		return o, fmt.Errorf("%w: WithOwner is only supported by Lock and FairLock", ErrInvalidArgument)
	case o.label != "" && k == kindLatch:
		return o, fmt.Errorf("%w: WithLabel is not supported by CountDownLatch (it has no holder)", ErrInvalidArgument)
	case o.waiterTimeout != 0 && k != kindFairLock:
		return o, fmt.Errorf("%w: WithWaiterTimeout is only supported by FairLock", ErrInvalidArgument)
	case o.lockDelay != 0 && k != kindLock && k != kindFairLock:
		return o, fmt.Errorf("%w: WithLockDelay is only supported by Lock and FairLock", ErrInvalidArgument)
	case o.minHold != 0 && k != kindLock && k != kindFairLock:
		return o, fmt.Errorf("%w: WithMinHold is only supported by Lock and FairLock", ErrInvalidArgument)
	case o.resize && k != kindSemaphore:
		return o, fmt.Errorf("%w: WithResize is only supported by Semaphore", ErrInvalidArgument)
	}
	return o, nil
}
