package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/argerr"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// Gather is the quorum round of every primitive that reads or writes
// without taking a hold: FairLock tickets, latch rounds, fence write-backs
// and RWLock downgrades. It sends call(i) to every node on lane, and
// returns once its Tally's verdict is known. A reply that accept takes
// (accept returns nil) is a yes. A rejection wrapping ErrInvalidArgument
// is a no.
//
// When won, it returns the round and nil. Read the replies where Answered
// and accept is nil. Otherwise the error is one of these:
//   - a failure that retrying cannot help (see failures.fatal);
//   - the rejection, when the rejections veto the round;
//   - ctx's error;
//   - ErrQuorumUnavailable wrapping the per-node errors.
func (c *Engine) Gather(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error) (*Round, error) {
	return c.gather(ctx, lane, call, accept, false)
}

// GatherAll is Gather that waits for every node's answer (each bounded by
// NodeTimeout), not only for the verdict: for a round that reports what
// each node did (a forced release). Its errors are Gather's.
func (c *Engine) GatherAll(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error) (*Round, error) {
	return c.gather(ctx, lane, call, accept, true)
}

// Read sends call to every node on the normal lane and waits for every
// answer, each bounded by NodeTimeout or ctx: an operator's view (a
// status, the permits available), which reports each node, not a verdict.
// It returns one reply per node; a node that did not answer has its
// NodeError.
func (c *Engine) Read(ctx context.Context, call nodeactor.Call) []nodeactor.Reply {
	return c.Fanout(ctx, nodeactor.Normal, func(int) nodeactor.Call { return call }, nil, nil).Replies
}

func (c *Engine) gather(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error, all bool) (*Round, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, nodeactor.ErrClosed
	}
	n := len(c.nodes)
	verdicts := make([]error, n) // accept's answer, read once per reply
	judged := make([]bool, n)
	verdict := func(r *Round, i int) error {
		if !judged[i] {
			verdicts[i], judged[i] = accept(r.Replies[i]), true
		}
		return verdicts[i]
	}
	r := c.Fanout(ctx, lane, call, func(r *Round) bool {
		if all {
			return false // until every node answered, or NodeTimeout
		}
		t, wrong := c.NewTally(), false
		for i := range r.Replies {
			if r.Answered[i] {
				switch err := verdict(r, i); {
				case err == nil:
					t.Yes++
				case errors.Is(err, argerr.ErrInvalidArgument):
					t.No++
				default:
					t.Other++
					wrong = wrong || scripts.IsWrongType(err)
				}
			}
		}
		return t.Won() || (t.Verdict() != Undecided && !wrong) // as in Attempt
	}, nil)
	return r, c.gatherVerdict(ctx, r, verdict)
}

// gatherVerdict reads each reply's verdict once and returns the round's
// outcome: nil at a quorum of accepted replies.
func (c *Engine) gatherVerdict(ctx context.Context, r *Round, verdict func(*Round, int) error) error {
	n := len(c.nodes)
	ok, invalid := 0, 0
	var (
		fails failures
		inv   error
	)
	for i, rep := range r.Replies {
		if !r.Answered[i] {
			fails.errs = append(fails.errs, rep.Err)
			continue
		}
		switch err := verdict(r, i); {
		case err == nil:
			ok++
		case errors.Is(err, argerr.ErrInvalidArgument):
			invalid++
			inv = err
		default:
			fails.add(err)
		}
	}
	t := c.NewTally()
	t.Yes, t.No, t.Other = ok, invalid, n-ok-invalid
	if t.Veto(fails.wrongs) {
		return fails.fatal(t)
	}
	if fails.wrong != nil {
		c.warnWrongType(fails.wrong)
	}
	if t.Won() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.Vetoed() {
		return inv
	}
	if err := fails.fatal(t); err != nil {
		return err
	}
	if inv != nil {
		fails.errs = append(fails.errs, inv)
	}
	return fmt.Errorf("%w: %d of %d nodes answered: %w", ErrQuorumUnavailable, ok, n, errors.Join(fails.errs...))
}

// failures sorts the failed replies of one round by what is known to be
// transient. Transient errors are those of nodeactor.Transient: connection
// errors, timeouts, LOADING, BUSY, TRYAGAIN, MOVED/ASK, CLUSTERDOWN and
// the like. The other errors end the round for good in three cases.
//   - An ACL refusal always ends it. Retrying cannot help, and every node
//     we were configured for answers the same.
//   - A wrong type at our keys ends it when it vetoes the round. A user's
//     key on a minority of the nodes leaves that node out, with a warning
//     (warnWrongType).
//   - Another error that is not transient (OOM, MISCONF, a script error)
//     ends it when it vetoes the round. A minority of such nodes counts as
//     down, so one node out of memory does not stop a quorum that works.
type failures struct {
	errs   []error // every failure, for the error message
	wrong  error   // a WRONGTYPE reply
	wrongs int     // nodes that answered one
	perm   error   // an ACL refusal
	other  error   // another error that is not transient
	others int     // nodes that answered such an error
}

func (f *failures) add(err error) {
	switch {
	case scripts.IsWrongType(err):
		f.wrong = err
		f.wrongs++
	case nodeactor.IsNoPerm(err):
		f.perm = err
	case !nodeactor.Transient(err):
		f.other = err
		f.others++
	}
	f.errs = append(f.errs, err)
}

// fatal returns the error that ends the round for good, or nil. t gives
// the node count and the quorum.
func (f *failures) fatal(t Tally) error {
	switch {
	case t.Veto(f.wrongs):
		return fmt.Errorf("%w: %w", ErrWrongType, f.wrong)
	case f.perm != nil:
		return fmt.Errorf("redlock: a node refused our script (see the ACL in docs/operations.md): %w", f.perm)
	case f.other != nil && t.Veto(f.others):
		return fmt.Errorf("redlock: %d of %d nodes failed with an error that retrying cannot fix: %w", f.others, t.N, f.other)
	}
	return nil
}

// wrongTypeEvery is how often one node's WRONGTYPE at one key is logged.
const wrongTypeEvery = time.Minute

// warnWrongType logs that a node answered WRONGTYPE (err names the node and
// the key) while the round went on without it: a key of another type at
// one of our names on a minority of the nodes. Each (node, key) is logged
// at most once per wrongTypeEvery.
func (c *Engine) warnWrongType(err error) {
	msg := err.Error()
	now := time.Now()
	c.wrongMu.Lock()
	last, seen := c.wrongSeen[msg]
	if !seen || now.Sub(last) >= wrongTypeEvery {
		if c.wrongSeen == nil || len(c.wrongSeen) > 1000 {
			c.wrongSeen = map[string]time.Time{}
		}
		c.wrongSeen[msg] = now
	}
	c.wrongMu.Unlock()
	if !seen || now.Sub(last) >= wrongTypeEvery {
		c.set.Logger.Warn("redlock: a key at one of our names on a minority of the nodes is of another type; "+
			"it was left untouched, and that node does not count for this name until it is removed", "err", err)
	}
}
