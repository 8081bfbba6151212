package guard

import (
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// What a look tells of a node that lost keys without a restart (docs/lock.md,
// "When a node forgot: one definition").

// lostKeys returns why node x, looked at by lk, may have lost keys
// without a restart since the previous look of the same identity, or "":
// its policy may evict, it evicted keys, or its wall clock stepped
// forward (keys expired early). A step back loses nothing: logged. Under
// g.mu; it records lk for the next look.
func (g *Guard) lostKeys(x int, st *nodeGuard, lk nodeactor.Look) string {
	why := lk.Evicts
	if st.clkID != "" && st.clkID == lk.Identity {
		switch {
		case why != "":
		case lk.Evicted > st.evicted:
			why = fmt.Sprintf("it evicted %d keys since the last look", lk.Evicted-st.evicted)
		}
		if !st.hzLow.IsZero() && why == "" {
			// The horizon key expires no later than high by this look.
			high := lk.Recv
			if lk.Horizon >= 0 {
				high = lk.Recv.Add(lk.Horizon + g.drift(lk.Horizon))
			}
			if high.Before(st.hzLow) {
				why = fmt.Sprintf("its horizon key lost %v since the last look (a clock step, an eviction or a delete)", st.hzLow.Sub(high).Round(time.Millisecond))
			}
		}
		if st.clkUs != 0 && lk.ServerUs != 0 {
			// TIME was read between each look's Sent and Recv: the node's
			// clock may advance by at most the span from the first's Sent
			// to the second's Recv, at least from its Recv to the second's
			// Sent, give or take the clock-rate drift.
			d := time.Duration(lk.ServerUs-st.clkUs) * time.Microsecond
			hi, lo := lk.Recv.Sub(st.clkSent), lk.Sent.Sub(st.clkRecv)
			if step := d - hi - g.drift(hi); step > 0 && why == "" {
				why = fmt.Sprintf("its wall clock stepped forward by at least %v (keys expired early)", step.Round(time.Millisecond))
			} else if back := lo - g.drift(lo) - d; back > 0 {
				g.cfg.Logger.Warn("redlock: a node's wall clock stepped back: its keys live longer (safe; a dead holder blocks its names longer)",
					"node", g.nodes[x].Addr(), "step", back.Round(time.Millisecond))
			}
		}
	}
	st.clkID, st.clkUs, st.clkSent, st.clkRecv, st.evicted = lk.Identity, lk.ServerUs, lk.Sent, lk.Recv, lk.Evicted
	st.hzLow = time.Time{}
	if lk.Horizon >= 0 {
		st.hzLow = lk.Sent.Add(lk.Horizon - g.drift(lk.Horizon))
	}
	return why
}

// Until adds to err, a reply of node i that wraps ErrNodeGuarded, until
// when this process holds the node out ("not yet decided" before its
// next look). Other errors are returned as they are.
func (g *Guard) Until(i int, err error) error {
	if g == nil || err == nil || !errors.Is(err, nodeactor.ErrNodeGuarded) {
		return err
	}
	st := g.NodeState(i)
	switch {
	case !st.Guarded || st.Until.IsZero():
		return fmt.Errorf("%w (held out until the guard's next look decides)", err)
	default:
		return fmt.Errorf("%w (held out until %s, in %v)", err, st.Until.Format("15:04:05.000"), time.Until(st.Until).Round(time.Millisecond))
	}
}
