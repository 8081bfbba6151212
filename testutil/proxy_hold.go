package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Held is one client→server request that a [Proxy] holds back: the first
// chunk that contains every substring given to [Proxy.Hold], and every byte
// after it on its connection (TCP keeps order), until Release.
type Held struct {
	subs     [][]byte
	caught   chan struct{} // closed when a chunk matched
	released chan struct{} // closed by Release
	once     sync.Once
	after    *Held  // if set, only a chunk that comes once after caught matches
	data     []byte // the chunk that matched; set before caught is closed
}

// Caught returns a channel closed once a chunk matched.
func (h *Held) Caught() <-chan struct{} { return h.caught }

// Await fails t unless a chunk matched within 10 s; what names the
// request awaited.
func (h *Held) Await(t testing.TB, what string) {
	t.Helper()
	select {
	case <-h.caught:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never came", what)
	}
}

// Data returns the chunk that matched (nil until Caught is closed).
func (h *Held) Data() []byte {
	select {
	case <-h.caught:
		return h.data
	default:
		return nil
	}
}

// Release lets the held chunk and everything behind it flow. It is
// idempotent; a hold that never caught anything is disarmed.
func (h *Held) Release() { h.once.Do(func() { close(h.released) }) }

// Hold arms a hold of the next client→server chunk, on any connection,
// that contains every one of subs. That chunk and everything after it on
// its connection wait until Release, as a request stuck in the network
// would. Other connections flow. Close releases every hold.
func (p *Proxy) Hold(subs ...string) *Held {
	h := &Held{caught: make(chan struct{}), released: make(chan struct{})}
	for _, s := range subs {
		h.subs = append(h.subs, []byte(s))
	}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// HoldAfter is Hold for the first matching chunk once prev caught one:
// the request that follows a chosen one (say, the rollback that a delayed
// acquire causes), not an earlier look-alike.
func (p *Proxy) HoldAfter(prev *Held, subs ...string) *Held {
	h := p.Hold(subs...)
	p.mu.Lock()
	h.after = prev
	p.mu.Unlock()
	return h
}

// Delay holds the next chunk that contains every one of subs for d (see
// Hold), then lets it flow.
func (p *Proxy) Delay(d time.Duration, subs ...string) *Held {
	h := p.Hold(subs...)
	p.wg.Go(func() {
		select {
		case <-h.caught:
		case <-h.released:
			return
		case <-p.ctx.Done():
			return
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.ctx.Done():
		}
		h.Release()
	})
	return h
}

// match returns the armed hold that data trips, and disarms it; nil if
// none.
func (p *Proxy) match(data []byte) *Held {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, h := range p.holds {
		ok := true
		for _, sub := range h.subs {
			ok = ok && bytes.Contains(data, sub)
		}
		if !ok {
			continue
		}
		if h.after != nil {
			select {
			case <-h.after.caught:
			default:
				continue // its predecessor has not come yet
			}
		}
		select {
		case <-h.released:
			continue // disarmed before it caught anything
		default:
		}
		p.holds = append(p.holds[:i], p.holds[i+1:]...)
		h.data = bytes.Clone(data)
		close(h.caught)
		return h
	}
	return nil
}
