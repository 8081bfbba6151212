package nodeactor

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// markUp records an answer that took rtt.
func (a *Actor) markUp(rtt time.Duration) {
	// Several lanes (a cluster node has four) measure at once: a CAS loop
	// keeps every sample (a load-then-store lost some).
	for {
		old := a.ewmaNs.Load()
		next := int64(rtt)
		if old != 0 {
			next = old + (int64(rtt)-old)/8
		}
		if a.ewmaNs.CompareAndSwap(old, next) {
			break
		}
	}
	if !a.up.Swap(true) {
		a.opt.Logger.Info("redlock: node up", "node", a.opt.Addr)
	}
}

// markDown records a failure to reach the node (not a ctx cancel).
func (a *Actor) markDown(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	a.lastErr.Store(&err)
	if a.up.Swap(false) {
		a.opt.Logger.Warn("redlock: node down", "node", a.opt.Addr, "err", err)
	}
}

// Status is a snapshot of the node's health.
type Status struct {
	Addr    string
	Up      bool
	Latency time.Duration // EWMA of batch round trips
	Caps    Capabilities
	LastErr error
	Fatal   error // set when a required capability is missing or the node is Unusable
	// GuardScripts counts the scripts the node guard sent to the node
	// through this actor: its looks', its armings', its horizon raises and
	// its confirmation checks. GuardChecks counts those checks alone.
	GuardScripts, GuardChecks int64
}

// Status returns a snapshot of the node's health and capabilities.
func (a *Actor) Status() Status {
	s := Status{Addr: a.opt.Addr, Up: a.up.Load(), Latency: time.Duration(a.ewmaNs.Load()), Caps: *a.caps.Load(),
		GuardScripts: a.guardRuns.Load(), GuardChecks: a.guardChecks.Load()}
	if e := a.lastErr.Load(); e != nil {
		s.LastErr = *e
	}
	if e := a.unarmable.Load(); e != nil {
		s.LastErr = fmt.Errorf("%w: %w", ErrNotArmed, *e) // why the node guard could not arm it
	}
	if e := a.fatal.Load(); e != nil {
		s.Fatal = *e
	}
	return s
}

// Up reports whether the node answered its last batch or ping.
func (a *Actor) Up() bool { return a.up.Load() }

// Caps returns the node's probed capabilities (zero before the first probe).
func (a *Actor) Caps() Capabilities { return *a.caps.Load() }

// countGuard counts one of the node guard's scripts as it is sent (Status).
func (a *Actor) countGuard(g GuardCall) {
	a.guardRuns.Add(1)
	if g == GuardCheck {
		a.guardChecks.Add(1)
	}
}
