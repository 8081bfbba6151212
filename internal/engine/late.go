package engine

import (
	"sync"
)

// Pending is an action on nodes whose late replies arrive before the
// outcome that decides it is known: Add keeps the node until Settle, then
// sends to it at once if the outcome asks for it. An attempt's late grants
// (rolled back unless the attempt holds) and a won Semaphore waiter's late
// refusals (claimed) are two of them. Safe for concurrent use; Add never
// blocks (it runs on an actor goroutine).
type Pending struct {
	send    func(node int)
	mu      sync.Mutex
	settled bool
	act     func() bool // after Settle: whether a late node gets send
	nodes   []int
}

// NewPending returns a Pending that runs send(node) for each node the
// outcome asks for.
func NewPending(send func(node int)) *Pending { return &Pending{send: send} }

// Add records node's late reply: kept until Settle, or sent at once after
// it if act says so.
func (p *Pending) Add(node int) {
	p.mu.Lock()
	if !p.settled {
		p.nodes = append(p.nodes, node)
		p.mu.Unlock()
		return
	}
	act := p.act
	p.mu.Unlock()
	if act() {
		p.send(node)
	}
}

// Settle records the outcome: act tells, now and for each later Add,
// whether a node gets send; the nodes kept so far get it now if act says so.
func (p *Pending) Settle(act func() bool) {
	p.mu.Lock()
	p.settled, p.act = true, act
	nodes := p.nodes
	p.nodes = nil
	p.mu.Unlock()
	if act() {
		for _, i := range nodes {
			p.send(i)
		}
	}
}

// Always and Never are the outcomes that ask for every node or none.
func Always() bool { return true }

func never() bool { return false }

// Never: see Always.
func Never() bool { return false }
