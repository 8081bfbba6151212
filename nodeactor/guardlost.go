package nodeactor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// What the node guard reads of a node that may lose keys without a
// restart, and how it holds one out (docs/lock.md, "When a node forgot:
// one definition"): the clock estimate armed calls carry, the eviction
// policy, a disarming, and the cause of a node that refused the guard.

// clockSlackMin is the least ClockSlack: an armed call that reaches the
// node up to a second late (a TCP retransmission, a pause of the node or
// of this process, a slow command ahead of it) still runs; a step larger
// is refused at the first call, a smaller one is left to the looks.
const clockSlackMin = time.Second

// clockRef is the node's TIME (µs) read by a look of identity id sent at
// sent.
type clockRef struct {
	id   string
	us   int64
	sent time.Time
	// stepped: a look read a TIME past the previous look's limit (a
	// forward step). Armed calls refuse (limit 0) until an arming or an
	// adoption, which follow the guard's hold: a look must not re-base
	// the limit on the stepped clock before the guard disarms the node
	// (a race TestOneNodeClockForwardOnALeaseOfTwoNodes met in CI).
	stepped bool
}

// limitMs is the latest TIME (ms) a call that reaches the node at t may
// read if its clock did not step forward since ref's look.
func (a *Actor) limitMs(ref *clockRef, t time.Time) int64 {
	since := t.Sub(ref.sent)
	return ref.us/1000 + int64(float64(since)*(1+a.opt.DriftFactor)/float64(time.Millisecond)) +
		max(a.opt.ClockSlack, clockSlackMin).Milliseconds() + 2
}

// storeClock records a look's TIME as the limit's base, keeping a step
// seen under the same identity until unstep.
func (a *Actor) storeClock(lk *Look) {
	ref := &clockRef{id: lk.Identity, us: lk.ServerUs, sent: lk.Sent}
	if prev := a.clock.Load(); prev != nil && prev.id == lk.Identity &&
		(prev.stepped || lk.ServerUs/1000 > a.limitMs(prev, lk.Recv)) {
		ref.stepped = true
	}
	a.clock.Store(ref)
}

// unstep ends a step's refusal: the node was armed or adopted again, after
// the guard's hold.
func (a *Actor) unstep() {
	if p := a.clock.Load(); p != nil && p.stepped {
		c := *p
		c.stepped = false
		a.clock.Store(&c)
	}
}

// clockLimit returns an armed call's last argument: the identity id and,
// after a ';', the latest the node's TIME may read (ms) when the call
// runs if its wall clock did not step forward since the guard's last
// look: that look's TIME, plus the time since it was sent with the rate
// drift, plus ClockSlack, at least clockSlackMin (a call that runs later
// is refused; its caller stopped waiting for it). Without a look of id: id alone, no check.
func (a *Actor) clockLimit(id string) string {
	ref := a.clock.Load()
	if ref == nil || ref.id != id || id == "" {
		return id
	}
	ms := a.limitMs(ref, time.Now())
	if ref.stepped {
		ms = 0 // every TIME is later: the prelude refuses
	}
	var buf [128]byte // an identity is 81 bytes: one allocation, the string
	b := append(buf[:0], id...)
	b = append(b, ';')
	return string(strconv.AppendInt(b, ms, 10))
}

// Disarm deletes the node's arm key: every process's armed calls refuse
// there from now on, until a guard arms it again. The engine's guard
// calls it when a look shows the node lost keys without a restart (an
// eviction, a forward step of its clock). It can only hold the node out.
func (a *Actor) Disarm(ctx context.Context) error {
	cl, ctx, cancel, err := a.guardConn(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return cl.Do(ctx, cl.B().Del().Key(a.armKey()).Build()).Error()
}

// noteUnarmable records err, the result of a look or an arming: a node's
// error reply (OOM, MISCONF, NOPERM...) is why the node is not armed;
// success, or a failure to reach the node, clears it.
func (a *Actor) noteUnarmable(err error) {
	if _, answered := rueidis.IsRedisErr(err); answered && !isNoScript(err) {
		a.unarmable.Store(&err)
		return
	}
	if err == nil {
		a.unarmable.Store(nil)
	}
}

// notArmed returns the error of an armed call that found its script
// missing: the reply the guard's last look or arming got, if the node
// refused it, else ErrNodeGuarded (the node forgot).
func (a *Actor) notArmed(noscript error) error {
	if p := a.unarmable.Load(); p != nil {
		return &NodeError{Addr: a.opt.Addr, Err: fmt.Errorf("%w: %w", ErrNotArmed, *p)}
	}
	return &NodeError{Addr: a.opt.Addr, Err: fmt.Errorf("%w: %v", ErrNodeGuarded, noscript)}
}

// readTime reads a TIME reply into lk.ServerUs.
func (lk *Look) readTime(r rueidis.RedisResult) error {
	v, err := r.AsStrSlice()
	if err != nil {
		return err
	}
	if len(v) != 2 {
		return fmt.Errorf("redlock: guard look: TIME answered %q", v)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("redlock: guard look: TIME: %w", err)
	}
	lk.ServerUs = sec*1_000_000 + usec
	return nil
}

// evicts returns why a node with these INFO memory fields may evict a
// key, or "": any policy but noeviction once maxmemory is set.
func evicts(info string) string {
	pol, max := infoField(info, "maxmemory_policy"), infoField(info, "maxmemory")
	if pol == "" || pol == "noeviction" || max == "" || max == "0" {
		return ""
	}
	return "maxmemory-policy " + pol + " with maxmemory " + max
}
