package nodeactor

import (
	"time"

	"github.com/redis/rueidis"
)

// run is the actor: the one goroutine that owns the node's state. It takes
// batches from the mailbox, keeps each resource's requests in order, and
// applies what its workers observed. A worker is a short-lived goroutine
// doing blocking I/O through rueidis: one batch, or one job (connect,
// health tick, subscriptions). A worker touches only what the actor handed
// it, and hands its outcome back on a channel.
func (a *Actor) run() {
	s := &state{
		busy:    map[string]int{},
		events:  make(chan func(*state), a.opt.Workers+8),
		backoff: 20 * time.Millisecond,
	}
	// The timers post to events, so run waits on few channels: a select
	// costs per case. Each source has one event out at most, and events
	// has room for all of them: a timer never blocks.
	post := func(f func(*state)) func() { return func() { s.events <- f } }
	s.tickT = time.AfterFunc(healthInterval, post(func(s *state) {
		s.wantTick = true
		if !s.closing {
			s.tickT.Reset(healthInterval)
		}
	}))
	s.connectT = time.AfterFunc(0, post(func(s *state) {
		if s.cl == nil && !s.job && !s.closing {
			a.startJob(s, a.connectJob)
		}
	}))
	s.retryT = time.AfterFunc(time.Hour, post(func(s *state) {
		s.front = append(s.front, s.delayed...)
		s.delayed = nil
	}))
	s.retryT.Stop()
	for {
		var pushErr <-chan error
		if !s.job && s.p != nil {
			pushErr = s.p.single()
		}
		select {
		case <-a.done:
			a.stop(s)
			return
		case <-a.mb.kick:
			if a.subDirty.Swap(false) {
				s.wantSub = true
			}
		case f := <-s.events:
			f(s)
		case err, ok := <-pushErr:
			if ok { // closed: closeConn replaced the hooks
				p, cl, pc := s.p, s.cl, s.p.conns[""]
				a.startJob(s, func() func(*state) { return a.pushBrokenJob(p, cl, pc, err) })
			}
		}
		a.dispatch(s)
		if s.job || s.cl == nil {
			continue
		}
		if s.wantSub {
			s.wantSub = false
			p := s.p
			a.startJob(s, func() func(*state) { return a.reconcileJob(p) })
		} else if s.wantTick {
			s.wantTick = false
			s.ticks++
			p, cl, ticks := s.p, s.cl, s.ticks
			a.startJob(s, func() func(*state) { return a.tickJob(p, cl, ticks) })
		}
	}
}

// state is the actor's own: only run and the functions it calls touch it.
type state struct {
	cl      rueidis.Client // nil until the first connect succeeded
	p       *pusher        // handed to a job while it runs
	backoff time.Duration  // before the next connect attempt

	// busy counts, per resource, the requests that are on the wire, in
	// front or delayed: the mailbox keeps a busy resource's requests.
	busy     map[string]int
	inflight int               // batches on the wire
	front    []Request         // follow-ups: first in the next batch
	delayed  []Request         // a cluster's resends, waiting for retryT
	events   chan func(*state) // workers' and timers' outcomes, applied by run
	slots    []*slot           // idle, reused
	retryT   *time.Timer       // moves delayed to front
	tickT    *time.Timer       // the health tick
	connectT *time.Timer       // the next connect attempt
	job      bool              // a job worker runs; it holds p
	closing  bool              // stop runs: no new job
	wantTick bool
	wantSub  bool
	ticks    int
}

// slot is what one batch on the wire uses, reused batch after batch.
type slot struct {
	clock batchClock
	batch []Request
	res   []string       // the batch's resources (Workers > 1 only)
	obs   [1]observation // exec observes the node once
}

// batchDone is a batch worker's outcome.
type batchDone struct {
	sl   *slot
	next []Request
	wait time.Duration
	seen seen
}

// startJob runs job on a worker; its outcome is applied by run. While
// the node has no client, a finished job is a failed connect: the next
// attempt is due after a backoff.
func (a *Actor) startJob(s *state, job func() func(*state)) {
	s.job = true
	a.wg.Go(func() {
		apply := job()
		s.events <- func(s *state) {
			s.job = false
			apply(s)
			if s.cl == nil && !s.closing {
				s.connectT.Reset(s.backoff)
				s.backoff = min(2*s.backoff, time.Second)
			}
		}
	})
}

// dispatch sends batches while fewer than Workers are on the wire. With
// one, the batch on the wire finished before dispatch runs: run needs no
// busy resources, and a delayed resend holds every request back, as it
// must hold back those of its resource.
func (a *Actor) dispatch(s *state) {
	inline := a.opt.Workers == 1
	for s.inflight < a.opt.Workers && !(inline && len(s.delayed) > 0) {
		var sl *slot
		if n := len(s.slots); n > 0 {
			sl, s.slots = s.slots[n-1], s.slots[:n-1]
		} else {
			sl = &slot{}
		}
		batch := a.mb.take(append(sl.batch[:0], s.front...), a.opt.MaxBatch, s.busy)
		clear(s.front)
		s.front = s.front[:0]
		sl.batch, sl.res = batch, sl.res[:0]
		if len(batch) == 0 {
			s.slots = append(s.slots, sl)
			return
		}
		for i := range batch {
			queued := a.dequeued(&batch[i]) // a follow-up is busy already
			if !inline {
				r := resource(batch[i].Call)
				sl.res = append(sl.res, r)
				if queued {
					s.busy[r]++
				}
			}
		}
		s.inflight++
		if s.cl == nil {
			a.fail(batch, ErrNodeDown)
			a.finished(s, batchDone{sl: sl})
			continue
		}
		cl := s.cl
		if inline {
			// run sends the batch itself, as a worker would, then goes
			// back to its other events before the next batch.
			d := batchDone{sl: sl, seen: sl.obs[:0]}
			d.next, d.wait = a.exec(cl, batch, &sl.clock, &d.seen)
			a.finished(s, d)
			if len(s.front) > 0 || a.mb.queued() {
				a.mb.kickOnce()
			}
			return
		}
		a.wg.Go(func() {
			d := batchDone{sl: sl, seen: sl.obs[:0]}
			d.next, d.wait = a.exec(cl, batch, &sl.clock, &d.seen)
			s.events <- func(s *state) { a.finished(s, d) }
		})
	}
}

// finished applies a batch worker's outcome.
func (a *Actor) finished(s *state, d batchDone) {
	s.inflight--
	a.apply(d.seen)
	s.unbusy(d.sl.res)
	clear(d.sl.batch) // drop references to finished requests
	if cap(d.sl.batch) > 4*a.opt.MaxBatch {
		d.sl.batch = nil // let a burst's backing array go
	}
	s.slots = append(s.slots, d.sl)
	for i := range d.next {
		if a.opt.Workers > 1 {
			s.busy[resource(d.next[i].Call)]++
		}
	}
	if d.wait > 0 {
		s.delayed = append(s.delayed, d.next...)
		if !s.closing {
			s.retryT.Reset(d.wait)
		}
	} else {
		s.front = append(s.front, d.next...)
	}
}

func (s *state) unbusy(res []string) {
	for _, r := range res {
		if s.busy[r]--; s.busy[r] <= 0 {
			delete(s.busy, r)
		}
	}
}

// stop waits for the workers, answers what is left and closes the push
// connections. Close closes the client.
func (a *Actor) stop(s *state) {
	s.closing = true
	s.tickT.Stop()
	s.connectT.Stop()
	s.retryT.Stop()
	for s.inflight > 0 || s.job {
		f := <-s.events
		f(s)
	}
	a.fail(s.front, ErrClosed)
	a.fail(s.delayed, ErrClosed)
	if s.p != nil {
		s.p.closeAll()
	}
}
