package nodeactor

import (
	"context"
	"errors"
	"time"
)

// seen is what a worker observed of the node's health, in order. The
// actor applies it: it is the only writer of up, ewmaNs and lastErr.
type seen []observation

type observation struct {
	rtt time.Duration
	err error // nil: the node answered
}

func (h *seen) up(rtt time.Duration) { *h = append(*h, observation{rtt: rtt}) }

// down records a failure to reach the node; a ctx cancel is none.
func (h *seen) down(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		*h = append(*h, observation{err: err})
	}
}

// apply records what a worker saw.
func (a *Actor) apply(h seen) {
	for _, o := range h {
		if o.err != nil {
			a.markDown(o.err)
		} else {
			a.markUp(o.rtt)
		}
	}
}

// markUp records an answer that took rtt. Only the actor calls it.
func (a *Actor) markUp(rtt time.Duration) {
	next := int64(rtt)
	if old := a.ewmaNs.Load(); old != 0 {
		next = old + (next-old)/8
	}
	a.ewmaNs.Store(next)
	if !a.up.Swap(true) {
		a.opt.Logger.Info("redlock: node up", "node", a.opt.Addr)
	}
}

// markDown records a failure to reach the node. Only the actor calls it.
func (a *Actor) markDown(err error) {
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
	Fatal   error // set when a required capability is missing or our credentials were refused
}

// Status returns a snapshot of the node's health and capabilities.
func (a *Actor) Status() Status {
	s := Status{Addr: a.opt.Addr, Up: a.up.Load(), Latency: time.Duration(a.ewmaNs.Load()), Caps: *a.caps.Load()}
	if e := a.lastErr.Load(); e != nil {
		s.LastErr = *e
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
