package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The engine's unit tests run a real Engine (fan-out, attempt, holds,
// renewer, router) against fake nodes inside a synctest bubble: time is
// virtual, so delays, timeouts and deadlines are exact and the tests take
// no wall time.

const nodeTimeout = 50 * time.Millisecond

// fakeNode is one node: a tiny in-memory lock server behind a FIFO served
// by one goroutine, like a node actor's lane. A request whose ctx ended
// before it was taken from the queue is dropped unsent (Normal lane) as the
// actor does; once taken it is "in flight" for delay and then runs.
type fakeNode struct {
	idx   int
	queue chan nodeactor.Request
	quit  chan struct{}

	mu            sync.Mutex
	owner         string // token holding the lock here ("" free)
	fence         int64
	delay         time.Duration
	fenceDelay    time.Duration   // instead of delay for fence write-backs
	full          bool            // TrySend refuses (a saturated node)
	gate          chan struct{}   // non-nil: the node is paused until it is closed
	dup           bool            // deliver every reply twice
	errAfterWrite bool            // an acquire takes the lock, then answers an error
	errReply      string          // an acquire answers this error and writes nothing
	backlog       int             // what Backlog reports
	multi         map[string]bool // non-nil: every token holds a lock of its own here (many resources)
	ops           []string        // "op token" in the order run
	closed        bool
}

func newFakeNode(idx int) *fakeNode {
	f := &fakeNode{idx: idx, queue: make(chan nodeactor.Request, 4096), quit: make(chan struct{})}
	go f.loop()
	return f
}

func (f *fakeNode) Backlog() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.backlog
}

// NormalBacklog is 0: the fake's acquires are not counted.
func (f *fakeNode) NormalBacklog() int { return 0 }

func (f *fakeNode) Addr() string { return "fake" + strconv.Itoa(f.idx) }
func (f *fakeNode) Status() nodeactor.Status {
	return nodeactor.Status{Addr: f.Addr(), Up: true}
}
func (f *fakeNode) Caps() nodeactor.Capabilities { return nodeactor.Capabilities{} }
func (f *fakeNode) Ready() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}
func (f *fakeNode) Subscribe(...string)   {}
func (f *fakeNode) Unsubscribe(...string) {}

func (f *fakeNode) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.quit)
	}
	return nil
}

func (f *fakeNode) TrySend(req nodeactor.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.full || f.closed {
		return nodeactor.ErrBusy
	}
	f.queue <- req
	return nil
}

func (f *fakeNode) pause() {
	f.mu.Lock()
	f.gate = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeNode) resume() {
	f.mu.Lock()
	close(f.gate)
	f.gate = nil
	f.mu.Unlock()
}

func (f *fakeNode) set(fn func(f *fakeNode)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeNode) state() (owner string, fence int64, ops []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owner, f.fence, append([]string(nil), f.ops...)
}

// loop takes requests in order ("writes them to the socket"): a paused
// node takes none; a stale Normal request (its ctx ended, its deadline
// passed, its round aborted) is dropped
// unsent. Each taken request arrives delay later and runs in order (wire):
// requests are pipelined, as on a real connection.
func (f *fakeNode) loop() {
	type flight struct {
		req nodeactor.Request
		at  time.Time
	}
	inflight := make(chan flight, cap(f.queue))
	go func() { // the wire and the server
		for {
			var fl flight
			select {
			case <-f.quit:
				return
			case fl = <-inflight:
			}
			if d := time.Until(fl.at); d > 0 {
				select {
				case <-time.After(d):
				case <-f.quit:
					return
				}
			}
			rep := f.run(fl.req.Call)
			fl.req.Deliver(rep)
			f.mu.Lock()
			dup := f.dup
			f.mu.Unlock()
			if dup {
				fl.req.Deliver(rep)
			}
		}
	}()
	for {
		var req nodeactor.Request
		select {
		case <-f.quit:
			return
		case req = <-f.queue:
		}
		f.mu.Lock()
		gate := f.gate
		f.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-f.quit:
				return
			}
		}
		if req.Stale(time.Now()) != nil {
			req.Deliver(nodeactor.Reply{Node: f.idx, Err: nodeactor.ErrNotSent})
			continue
		}
		f.mu.Lock()
		d := f.delay
		if req.Call.Args[0] == "fence" && f.fenceDelay > 0 {
			d = f.fenceDelay
		}
		at := time.Now().Add(d)
		f.mu.Unlock()
		inflight <- flight{req: req, at: at}
	}
}

// run executes one call: acquire, rollback, release, renew, fence, echo
// (answers its argument), or wrongtype (answers a WRONGTYPE error).
func (f *fakeNode) run(call nodeactor.Call) nodeactor.Reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	op, arg := call.Args[0], call.Args[1]
	f.ops = append(f.ops, op+" "+arg)
	now := time.Now().UnixMilli()
	rep := nodeactor.Reply{Node: f.idx}
	switch op {
	case "acquire":
		if f.errReply != "" {
			m := mock.RedisError(f.errReply)
			rep.Err = m.Error()
			break
		}
		if f.errAfterWrite && f.owner == "" {
			f.owner = arg
			rep.Err = errors.New("ERR a script error after its write")
			break
		}
		if f.multi != nil {
			f.multi[arg] = true
			rep.Msg = mock.RedisArray(mock.RedisInt64(1), mock.RedisInt64(f.fence), mock.RedisInt64(now), mock.RedisInt64(0))
			break
		}
		if f.owner == "" || f.owner == arg {
			f.owner = arg
			rep.Msg = mock.RedisArray(mock.RedisInt64(1), mock.RedisInt64(f.fence), mock.RedisInt64(now), mock.RedisInt64(0))
		} else {
			rep.Msg = mock.RedisArray(mock.RedisInt64(0), mock.RedisInt64(1000), mock.RedisInt64(now), mock.RedisInt64(holderTag(f.owner)))
		}
	case "rollback", "release":
		v := int64(0)
		switch {
		case f.owner == arg:
			f.owner, v = "", 1
		case op == "release" && f.owner != "":
			v = 2 // another holder's key (lock.lua's ReleaseTaken)
		}
		rep.Msg = mock.RedisInt64(v)
	case "renew": // answered as the scripts' prelude does (scripts.ParseRenewal)
		v := int64(scripts.RenewNotOurs)
		switch {
		case f.multi != nil && f.multi[arg]:
			v = scripts.RenewRenewed
		case f.owner == arg:
			v = scripts.RenewRenewed
		case f.owner == "":
			v = scripts.RenewMissing // a node restarted empty, or a forced release
		}
		rep.Msg = mock.RedisInt64(v)
	case "fence":
		n, _ := strconv.ParseInt(arg, 10, 64)
		f.fence = max(f.fence, n)
		rep.Msg = mock.RedisInt64(1)
	case "echo":
		rep.Msg = mock.RedisString(arg)
	case "wrongtype":
		m := mock.RedisError("WRONGTYPE Operation against a key holding the wrong kind of value")
		rep.Err = m.Error()
	default:
		rep.Err = errors.New("fake: unknown op " + op)
	}
	return rep
}

// world is an engine over n fake nodes.
type world struct {
	e     *Engine
	nodes []*fakeNode
}

func newWorld(t *testing.T, n int) *world {
	t.Helper()
	set := Settings{
		KeyPrefix: "t:", DefaultTTL: time.Second, NodeTimeout: nodeTimeout, DriftFactor: 0.01,
		RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond,
		HandoffWindow: 100 * time.Millisecond, StartTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	specs := make([]NodeSpec, n)
	w := &world{}
	e := newEngine(set, specs)
	for i := range n {
		f := newFakeNode(i)
		w.nodes = append(w.nodes, f)
		e.nodes = append(e.nodes, f)
	}
	e.start()
	w.e = e
	t.Cleanup(func() { e.Close() })
	return w
}

// fakeProto renews and releases a hold on the fake nodes.
type fakeProto struct{ token string }

func (p fakeProto) RenewCall(int, time.Duration, bool) nodeactor.Call {
	return nodeactor.Call{Args: []string{"renew", p.token}}
}
func (p fakeProto) ReleaseCall(int) nodeactor.Call {
	return nodeactor.Call{Args: []string{"release", p.token}}
}

func vote(rep nodeactor.Reply) (Vote, error) {
	if rep.Err != nil {
		return Vote{}, rep.Err
	}
	v, err := rep.Msg.AsIntSlice()
	if err != nil || len(v) < 4 {
		return Vote{}, errors.New("fake: bad reply")
	}
	if v[0] == 1 {
		return Vote{Granted: true, Fence: v[1], Now: v[2]}, nil
	}
	return Vote{Now: v[2], Hint: time.Duration(v[1]) * time.Millisecond, Holder: v[3]}, nil
}

// holderTag is the fake nodes' tag of a holder in a refusal, as lock.lua's
// (0, naming nobody, for an owner "anon...").
func holderTag(owner string) int64 {
	if strings.HasPrefix(owner, "anon") {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(owner))
	return int64(h.Sum32())
}

func (w *world) spec(token string, ttl time.Duration) AttemptSpec { return w.specHB(token, ttl, 0) }

// specHB is spec with a heartbeat requirement on the hold.
func (w *world) specHB(token string, ttl, heartbeat time.Duration) AttemptSpec {
	return AttemptSpec{Op: fakeOp{token: token, ttl: ttl, heartbeat: heartbeat}, TTL: ttl}
}

// fakeOp is the fake nodes' attempt for token.
type fakeOp struct {
	token          string
	ttl, heartbeat time.Duration
}

func (o fakeOp) Acquire(int) nodeactor.Call {
	return nodeactor.Call{Args: []string{"acquire", o.token}}
}
func (o fakeOp) Rollback(int) nodeactor.Call {
	return nodeactor.Call{Args: []string{"rollback", o.token}}
}
func (o fakeOp) Vote(rep nodeactor.Reply) (Vote, error) { return vote(rep) }
func (o fakeOp) Fence(f int64, _ int) nodeactor.Call {
	return nodeactor.Call{Args: []string{"fence", strconv.FormatInt(f, 10)}}
}
func (o fakeOp) Hold(uint64) HoldSpec {
	return HoldSpec{Keys: []string{"r"}, Token: o.token, TTL: o.ttl, AutoRenew: true, Heartbeat: o.heartbeat, Protocol: fakeProto{o.token}}
}

// mustHold makes one attempt for token and returns its hold.
func (w *world) mustHold(t *testing.T, token string, ttl time.Duration) *Hold {
	t.Helper()
	res := w.e.Attempt(t.Context(), w.spec(token, ttl))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return res.Hold
}

func (w *world) owners() []string {
	out := make([]string, len(w.nodes))
	for i, f := range w.nodes {
		out[i], _, _ = f.state()
	}
	return out
}

func count(ops []string, op string) int {
	n := 0
	for _, o := range ops {
		if o == op {
			n++
		}
	}
	return n
}

func TestAttemptDecidesAtQuorumAndKeepsALateGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[2].set(func(f *fakeNode) { f.delay = 20 * time.Millisecond })
		start := time.Now()
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil || res.Hold == nil {
			t.Fatalf("attempt: %v", res.Err)
		}
		if d := time.Since(start); d >= 20*time.Millisecond {
			t.Fatalf("decided after %s: it waited for the slow node", d)
		}
		time.Sleep(60 * time.Millisecond) // the late grant, and a rollback if one were sent
		synctest.Wait()
		if o := w.owners(); o[2] != "A" {
			t.Fatalf("owners %v: the late grant under a live hold was not kept", o)
		}
		if _, _, ops := w.nodes[2].state(); count(ops, "rollback A") != 0 {
			t.Fatalf("node 2 ops %v: a live hold's late grant was rolled back", ops)
		}
		if err := res.Hold.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
		synctest.Wait()
		for i, o := range w.owners() {
			if o != "" {
				t.Fatalf("node %d still held by %q after Release", i, o)
			}
		}
	})
}

func TestRefusedAttemptRollsBackOnlyWhatItHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[0].set(func(f *fakeNode) { f.owner = "other" })
		w.nodes[2].set(func(f *fakeNode) { f.delay = 20 * time.Millisecond })
		// node 1 grants at once, node 0 refuses at once, node 2 grants
		// 20 ms later: the attempt waits for node 2 (a 1-1 tie cannot
		// decide), and wins.
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil {
			t.Fatalf("attempt: %v", res.Err)
		}
		res.Hold.Release(context.Background())

		// Now two refusals decide at once; node 2's grant arrives after
		// the decision and must be rolled back by the late handler; node 0
		// and node 1 (refused) must get no rollback at all.
		w.nodes[1].set(func(f *fakeNode) { f.owner = "other" })
		res = w.e.Attempt(t.Context(), w.spec("B", time.Second))
		if !errors.Is(res.Err, ErrNotAcquired) || res.Split {
			t.Fatalf("attempt: err %v split %v, want a clean refusal", res.Err, res.Split)
		}
		time.Sleep(40 * time.Millisecond)
		synctest.Wait()
		if o := w.owners(); o[2] != "" {
			t.Fatalf("owners %v: the late grant of a refused attempt was left", o)
		}
		for i := range 2 {
			if _, _, ops := w.nodes[i].state(); count(ops, "rollback B") != 0 {
				t.Fatalf("node %d ops %v: a refusing node got a rollback", i, ops)
			}
		}
	})
}

func TestSplitVoteRollsBackTheGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[0].set(func(f *fakeNode) { f.owner = "other" })
		w.nodes[2].pause() // silent: the round ends at NodeTimeout with 1 grant, 1 refusal
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if !errors.Is(res.Err, ErrNotAcquired) || !res.Split {
			t.Fatalf("attempt: err %v split %v, want a split refusal", res.Err, res.Split)
		}
		synctest.Wait()
		if o := w.owners(); o[1] != "" {
			t.Fatalf("owners %v: the split grant was not rolled back", o)
		}
		// The paused node's acquire was aborted unsent: on resume it must
		// not take the lock.
		w.nodes[2].resume()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if o := w.owners(); o[2] != "" {
			t.Fatalf("owners %v: an aborted acquire ran on resume", o)
		}
	})
}

// A waiter's queued attempt that a quorum refused keeps its request to a
// node that had not taken it yet: that request is the waiter's place in
// the node's queue (the waiter then sleeps until a message or its holder's
// TTL, so a dropped enqueue left it out of that node's order for a whole
// TTL). Its reply is handled as a late one: a grant is rolled back.
func TestQueuedAttemptStillReachesTheSlowNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[0].set(func(f *fakeNode) { f.owner = "other" })
		w.nodes[1].set(func(f *fakeNode) { f.owner = "other" })
		w.nodes[2].pause() // busy: the request waits unsent
		spec := w.spec("A", time.Second)
		spec.Queue = true
		res := w.e.Attempt(t.Context(), spec)
		if !errors.Is(res.Err, ErrNotAcquired) {
			t.Fatalf("attempt: err %v, want a refusal", res.Err)
		}
		w.nodes[2].resume()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		_, _, ops := w.nodes[2].state()
		if count(ops, "acquire A") != 1 {
			t.Fatalf("node 2 ops %v: the queued attempt's request was dropped unsent", ops)
		}
		if o := w.owners(); o[2] != "" {
			t.Fatalf("owners %v: its late grant was not rolled back", o)
		}
	})
}

func TestCancelledAttemptLeavesNothingWhenItReturns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[1].set(func(f *fakeNode) { f.delay = 30 * time.Millisecond })
		w.nodes[2].set(func(f *fakeNode) { f.delay = 30 * time.Millisecond })
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		res := w.e.Attempt(ctx, w.spec("A", time.Second))
		if !errors.Is(res.Err, context.DeadlineExceeded) {
			t.Fatalf("attempt: %v, want the ctx's error", res.Err)
		}
		// The grants of nodes 1 and 2 were in flight when ctx ended; the
		// rollback runs after them on each node (order per node) and is
		// awaited, so nothing is left the moment Attempt returns.
		for i, o := range w.owners() {
			if o != "" {
				t.Fatalf("node %d held by %q after a cancelled attempt returned", i, o)
			}
		}
	})
}

func TestDuplicateRepliesCountOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		// node 0 grants and answers twice, node 2 refuses 5 ms later, node
		// 1 is silent: one grant and one refusal, a split refusal at
		// NodeTimeout; a duplicate counted as a second grant would win.
		w.nodes[0].set(func(f *fakeNode) { f.dup = true })
		w.nodes[1].pause()
		w.nodes[2].set(func(f *fakeNode) { f.owner, f.delay = "other", 5*time.Millisecond })
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Hold != nil || !errors.Is(res.Err, ErrNotAcquired) {
			t.Fatalf("attempt: hold %v err %v: one node's grant counted twice", res.Hold != nil, res.Err)
		}
		synctest.Wait()
		if o := w.owners(); o[0] != "" {
			t.Fatalf("owners %v: the grant was not rolled back", o)
		}
		w.nodes[1].resume()
	})
}

func TestFullNodeFailsOnlyItself(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[2].set(func(f *fakeNode) { f.full = true })
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil {
			t.Fatalf("attempt with one saturated node: %v", res.Err)
		}
		res.Hold.Release(context.Background())
		w.nodes[1].set(func(f *fakeNode) { f.full = true })
		res = w.e.Attempt(t.Context(), w.spec("B", time.Second))
		if !errors.Is(res.Err, ErrQuorumUnavailable) || !errors.Is(res.Err, nodeactor.ErrBusy) {
			t.Fatalf("attempt with two saturated nodes: %v, want quorum unavailable wrapping ErrBusy", res.Err)
		}
		synctest.Wait()
		if o := w.owners(); o[0] != "" {
			t.Fatalf("owners %v: the minority grant was left", o)
		}
	})
}

func TestFenceIsWrittenBackWhenFewerThanAQuorumHoldTheMax(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// The last fence (9) is on a quorum (nodes 0 and 1); node 0 is
		// silent, so the attempt decides on nodes 1 and 2 (9 and 5): 9 is
		// the fence, and it must be written back so that a quorum holds it.
		w := newWorld(t, 3)
		for i, f := range []int64{9, 9, 5} {
			w.nodes[i].set(func(n *fakeNode) { n.fence = f })
		}
		w.nodes[0].pause()
		defer w.nodes[0].resume()
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if res.Hold.Fence() != 9 {
			t.Fatalf("fence %d, want the max 9", res.Hold.Fence())
		}
		synctest.Wait()
		for i, f := range w.nodes[1:] {
			if _, fence, _ := f.state(); fence != 9 {
				t.Fatalf("node %d fence %d: the max was not written back to a quorum", i+1, fence)
			}
		}
		res.Hold.Release(context.Background())
	})
}

func TestLostClosesByTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		h := w.mustHold(t, "A", time.Second)
		time.Sleep(200 * time.Millisecond)
		for _, f := range w.nodes {
			f.pause()
		}
		deadline := h.Deadline()
		<-h.Lost()
		if now := time.Now(); now.After(deadline) {
			t.Fatalf("Lost closed %s after the Deadline", now.Sub(deadline))
		}
		if !errors.Is(h.Err(), ErrLeaseLost) {
			t.Fatalf("Err %v, want ErrLeaseLost", h.Err())
		}
		for _, f := range w.nodes {
			f.resume()
		}
	})
}

func TestRenewalsKeepAHoldPastItsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[2].pause() // a minority down does not cost the hold
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		first := res.Hold.Deadline()
		time.Sleep(5 * time.Second)
		if !res.Hold.Valid() || !res.Hold.Deadline().After(first.Add(4*time.Second)) {
			t.Fatalf("after 5 s: valid %v, deadline moved by %s", res.Hold.Valid(), res.Hold.Deadline().Sub(first))
		}
		if err := res.Hold.Release(context.Background()); err != nil {
			t.Fatalf("release with one node paused: %v", err)
		}
		w.nodes[2].resume()
	})
}

func TestReleaseReturnsAtQuorumAndStillReachesTheSlowNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		synctest.Wait()
		w.nodes[2].set(func(f *fakeNode) { f.delay = 300 * time.Millisecond })
		start := time.Now()
		if err := res.Hold.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d >= 300*time.Millisecond {
			t.Fatalf("Release waited %s for the slow node", d)
		}
		time.Sleep(400 * time.Millisecond)
		synctest.Wait()
		if o := w.owners(); o[2] != "" {
			t.Fatalf("owners %v: the slow node never got the release", o)
		}
	})
}

// A WRONGTYPE (a key of another type at our name) ends a round when more
// than N−Q nodes answer it; on a minority that node is left out, like a
// node that is down.
func TestGatherEndsAtAWrongTypeOnMoreThanNMinusQ(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		wrongOn := map[int]bool{0: true}
		call := func(i int) nodeactor.Call {
			if wrongOn[i] {
				return nodeactor.Call{Args: []string{"wrongtype", "x"}}
			}
			return nodeactor.Call{Args: []string{"fence", "1"}}
		}
		ok := func(rep nodeactor.Reply) error { return rep.Err }
		if _, err := w.e.Gather(t.Context(), nodeactor.Urgent, call, ok); err != nil {
			t.Fatalf("a wrong type on 1 of 3 nodes: %v, want the other two's quorum", err)
		}
		// With another node failing, no quorum: the wrong type is among the
		// per-node errors, and a retry can succeed once that node is back.
		w.nodes[1].set(func(f *fakeNode) { f.full = true })
		_, err := w.e.Gather(t.Context(), nodeactor.Urgent, call, ok)
		if !errors.Is(err, ErrQuorumUnavailable) || errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Gather: %v, want ErrQuorumUnavailable naming the WRONGTYPE", err)
		}
		w.nodes[1].set(func(f *fakeNode) { f.full = false })
		wrongOn[1] = true
		_, err = w.e.Gather(t.Context(), nodeactor.Urgent, call, ok)
		var re *rueidis.RedisError
		if !errors.Is(err, ErrWrongType) || !errors.As(err, &re) {
			t.Fatalf("a wrong type on 2 of 3 nodes: %v, want ErrWrongType wrapping the server's error", err)
		}
	})
}

func TestValidityIsCheckedAfterTheFenceRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		// No fence counter anywhere: the fence is written back, and that
		// round takes longer than the TTL.
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.fenceDelay = 45 * time.Millisecond })
		}
		res := w.e.Attempt(t.Context(), w.spec("A", 40*time.Millisecond))
		if res.Hold != nil {
			if now := time.Now(); !res.Hold.Deadline().After(now) {
				t.Fatalf("a hold %s past its Deadline was returned", now.Sub(res.Hold.Deadline()))
			}
			res.Hold.Release(context.Background())
			return
		}
		if !errors.Is(res.Err, ErrQuorumUnavailable) {
			t.Fatalf("attempt: %v, want validity exhausted", res.Err)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		for i, o := range w.owners() {
			if o != "" {
				t.Fatalf("node %d still held by %q after the attempt failed", i, o)
			}
		}
	})
}

func TestAnErrorAfterAWriteIsRolledBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[0].set(func(f *fakeNode) { f.errAfterWrite = true })
		w.nodes[1].set(func(f *fakeNode) { f.owner = "other" })
		w.nodes[2].set(func(f *fakeNode) { f.owner = "other" })
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Hold != nil {
			t.Fatal("acquired against two refusals")
		}
		synctest.Wait()
		if o := w.owners(); o[0] != "" {
			t.Fatalf("owners %v: the node that answered an error after its write kept it", o)
		}
	})
}

func TestHeartbeatGatesRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		res := w.e.Attempt(t.Context(), w.specHB("A", time.Second, 300*time.Millisecond))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		h := res.Hold
		// Heartbeats every 100 ms keep it renewed well past its TTL.
		for range 30 {
			time.Sleep(100 * time.Millisecond)
			h.Heartbeat()
		}
		if !h.Valid() {
			t.Fatalf("lost while heartbeating: %v", h.Err())
		}
		// A heartbeat that stops: no renewal once it is 300 ms old, so the
		// hold is lost by its Deadline, with the reason.
		stopped := time.Now()
		deadline := h.Deadline()
		<-h.Lost()
		if now := time.Now(); now.After(h.Deadline()) || now.Sub(stopped) > 300*time.Millisecond+time.Second {
			t.Fatalf("lost %s after the last heartbeat (deadline %s after it)", now.Sub(stopped), deadline.Sub(stopped))
		}
		if !errors.Is(h.Err(), ErrLeaseLost) || !errors.Is(h.Err(), ErrNoHeartbeat) {
			t.Fatalf("Err %v, want ErrLeaseLost wrapping ErrNoHeartbeat", h.Err())
		}
	})
}

func TestLateHeartbeatResumesRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		res := w.e.Attempt(t.Context(), w.specHB("A", time.Second, 200*time.Millisecond))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		h := res.Hold
		// Silent past the first renewal (at TTL/3) but back before the
		// Deadline: renewals resume and the hold lives on.
		time.Sleep(600 * time.Millisecond)
		h.Heartbeat()
		for range 20 {
			time.Sleep(100 * time.Millisecond)
			h.Heartbeat()
		}
		if !h.Valid() {
			t.Fatalf("lost after a late heartbeat: %v", h.Err())
		}
		h.Release(context.Background())
	})
}

func TestAQuorumOfMissingKeysLosesAtOnce(t *testing.T) {
	for n := 2; n <= 5; n++ {
		t.Run(fmt.Sprintf("N%d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { missingKeysLose(t, n) })
		})
	}
}

func missingKeysLose(t *testing.T, n int) {
	w := newWorld(t, n)
	q := n/2 + 1
	h := w.mustHold(t, "A", 3*time.Second)
	synctest.Wait() // the grants still in flight at the decision have run
	// N−Q+1 nodes lose the key (restarted empty, or a forced release):
	// nobody can confirm this hold again and others may acquire, so the
	// next renewal (at TTL/3) loses it, long before its Deadline. On an
	// even N that is fewer than Q nodes.
	for _, f := range w.nodes[:n-q+1] {
		f.set(func(f *fakeNode) { f.owner = "" })
	}
	start := time.Now()
	<-h.Lost()
	if d, left := time.Since(start), h.Deadline().Sub(time.Now()); d > 1100*time.Millisecond || left < time.Second {
		t.Fatalf("lost %s after the keys went, %s before its Deadline: it waited for the Deadline", d, left)
	}
	if n-q == 0 {
		return
	}
	// N−Q nodes missing are restarted nodes: re-taken, not lost.
	synctest.Wait() // the lost hold's keys are deleted everywhere
	hb := w.mustHold(t, "B", 3*time.Second)
	synctest.Wait()
	for _, f := range w.nodes[q:] {
		f.set(func(f *fakeNode) { f.owner = "" })
	}
	time.Sleep(5 * time.Second)
	if !hb.Valid() {
		t.Fatalf("%d missing nodes cost the hold: %v", n-q, hb.Err())
	}
	hb.Release(context.Background())
}

func TestAMinorityOfBrokenNodesIsTreatedAsDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		oom := "OOM command not allowed when used memory > 'maxmemory'."
		w.nodes[2].set(func(f *fakeNode) { f.errReply = oom })
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil {
			t.Fatalf("one node out of memory took the lock away from a working quorum: %v", res.Err)
		}
		res.Hold.Release(context.Background())
		synctest.Wait()
		w.nodes[1].set(func(f *fakeNode) { f.errReply = oom })
		res = w.e.Attempt(t.Context(), w.spec("B", time.Second))
		if res.Err == nil || errors.Is(res.Err, ErrQuorumUnavailable) || !strings.Contains(res.Err.Error(), "OOM") {
			t.Fatalf("two of three nodes out of memory: %v, want a fatal error with the server's text (not a retryable one)", res.Err)
		}
	})
}

// Direct grants make a hold without an acquire round: validity counts
// from the granted attempt's start (a grant that leaves less than asked is
// refused, holding nothing), fewer than a quorum hold nothing, and the
// fence is the largest granted, written back where fewer than a quorum
// hold it.
func TestTakeGrantsCountsFromTheAttemptAndDecidesTheFence(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		s := w.spec("A", time.Second)
		spec := func(start time.Time, fences ...int64) DirectSpec {
			d := DirectSpec{Start: start, TTL: time.Second, MinValidity: 500 * time.Millisecond, Op: s.Op}
			for _, f := range fences {
				d.Grants = append(d.Grants, Vote{Granted: true, Fence: f, Now: 1})
			}
			return d
		}
		if _, err := w.e.TakeGrants(t.Context(), spec(time.Now(), 7)); !errors.Is(err, ErrQuorumUnavailable) {
			t.Fatalf("one grant of three: %v", err)
		}
		if _, err := w.e.TakeGrants(t.Context(), spec(time.Now().Add(-600*time.Millisecond), 7, 7)); !errors.Is(err, ErrGrantTooLate) {
			t.Fatalf("an attempt started 600 ms ago, TTL 1 s: %v", err)
		}
		for _, f := range w.nodes {
			if _, _, ops := f.state(); len(ops) != 0 {
				t.Fatalf("a refused grant sent %v", ops)
			}
		}
		start := time.Now().Add(-100 * time.Millisecond)
		h, err := w.e.TakeGrants(t.Context(), spec(start, 8, 9))
		if err != nil {
			t.Fatal(err)
		}
		if h.Fence() != 9 || !h.Deadline().Equal(start.Add(time.Second-w.e.Drift(time.Second))) {
			t.Fatalf("fence %d deadline %v, want 9 and start+TTL-drift", h.Fence(), h.Deadline())
		}
		synctest.Wait()
		written := 0
		for _, f := range w.nodes {
			if _, fence, _ := f.state(); fence == 9 {
				written++
			}
		}
		if written < 2 {
			t.Fatalf("fence 9 on %d nodes: not written back to a quorum", written)
		}
		h.Release(context.Background())
	})
}

// A refused attempt drops its request still queued unsent on a busy node
// (Round.Abort): when that node resumes well before the round's bound, the
// acquire must not run there. The round has no context of its own to
// cancel; Abort drops the requests through their tickets.
func TestAbortDropsAQueuedAcquireBeforeItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[0].set(func(f *fakeNode) { f.owner = "other" })
		w.nodes[1].set(func(f *fakeNode) { f.owner = "other" })
		w.nodes[2].pause() // busy: the request waits unsent
		start := time.Now()
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if !errors.Is(res.Err, ErrNotAcquired) {
			t.Fatalf("attempt: err %v, want a refusal", res.Err)
		}
		if d := time.Since(start); d >= nodeTimeout/2 {
			t.Fatalf("refused after %s: it waited for the paused node", d)
		}
		w.nodes[2].resume() // long before the round's deadline (nodeTimeout)
		synctest.Wait()
		if _, _, ops := w.nodes[2].state(); count(ops, "acquire A") != 0 {
			t.Fatalf("node 2 ops %v: an aborted acquire was sent", ops)
		}
	})
}

// The replies a round did not wait for arrive after it returned, some
// already on its channel when it decided (node 1 answers with node 0),
// some later (node 2): each must be recorded by its own round or reach
// that round's late handler, exactly once, and never a later round (the
// rounds' reply channels are reused).
func TestLateRepliesReachOnlyTheirOwnRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[2].set(func(f *fakeNode) { f.delay = 10 * time.Millisecond })
		echo := func(tok string) func(int) nodeactor.Call {
			return func(int) nodeactor.Call { return nodeactor.Call{Args: []string{"echo", tok}} }
		}
		first := func(r *Round) bool { return r.NAnswered >= 1 }
		var mu sync.Mutex
		late := map[string][]nodeactor.Reply{}
		rounds := make([]*Round, 30)
		for k := range rounds {
			tok := "t" + strconv.Itoa(k)
			rounds[k] = w.e.Fanout(t.Context(), nodeactor.Urgent, echo(tok), first, func(rep nodeactor.Reply) {
				mu.Lock()
				late[tok] = append(late[tok], rep)
				mu.Unlock()
			})
			time.Sleep(time.Duration(k%3) * 4 * time.Millisecond) // node 2's late replies land during later rounds
		}
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		for k, r := range rounds {
			tok := "t" + strconv.Itoa(k)
			seen := make([]int, 3)
			for i, rep := range r.Replies {
				if !r.Answered[i] {
					continue
				}
				if s, _ := rep.Msg.ToString(); s != tok || rep.Node != i {
					t.Errorf("round %s recorded node %d's reply %q from node %d", tok, i, s, rep.Node)
				}
				seen[i]++
			}
			for _, rep := range late[tok] {
				if s, _ := rep.Msg.ToString(); s != tok {
					t.Errorf("round %s's late handler got %q", tok, s)
				}
				seen[rep.Node]++
			}
			if !slices.Equal(seen, []int{1, 1, 1}) {
				t.Errorf("round %s: replies per node %v (recorded or late), want each once", tok, seen)
			}
			if r.Answered[2] {
				t.Errorf("round %s waited for the slow node", tok)
			}
		}
	})
}

// Done, Lost and Context are made on first use: a hold that ended before
// any of them was asked for still gives them closed (Lost only if lost)
// and cancelled with its Err as the cause.
func TestHoldChannelsAskedForAfterTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		h := w.mustHold(t, "A", time.Second)
		if err := h.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Done():
		default:
			t.Fatal("Done not closed after Release")
		}
		select {
		case <-h.Lost():
			t.Fatal("Lost closed by Release")
		default:
		}
		if c := context.Cause(h.Context()); !errors.Is(c, ErrReleased) {
			t.Fatalf("Context cause %v, want ErrReleased", c)
		}

		// Lost first, the rest asked for only after it closed: they must
		// already be done (the order observers rely on).
		h = w.mustHold(t, "B", time.Second)
		lost := h.Lost()
		for _, f := range w.nodes {
			f.pause()
		}
		<-lost
		select {
		case <-h.Done():
		default:
			t.Fatal("Lost closed but Done not")
		}
		if c := context.Cause(h.Context()); !errors.Is(c, ErrLeaseLost) {
			t.Fatalf("Context cause %v, want ErrLeaseLost", c)
		}
		for _, f := range w.nodes {
			f.resume()
		}
	})
}

// A grant that arrives after its hold's Release started is not rolled
// back: the release was queued behind the acquire on that node (the node
// actor keeps each resource's order) and deletes it — a rollback would
// only cost the node one more script. A grant that arrives after the hold
// was lost is rolled back (no release will come).
func TestLateGrantBehindARelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[2].set(func(f *fakeNode) { f.delay = 20 * time.Millisecond })
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil || res.Hold == nil {
			t.Fatalf("attempt: %v", res.Err)
		}
		if err := res.Hold.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		synctest.Wait()
		_, _, ops := w.nodes[2].state()
		if count(ops, "rollback A") != 0 || count(ops, "release A") != 1 {
			t.Fatalf("node 2 ops %v: want the release only", ops)
		}
		for i, o := range w.owners() {
			if o != "" {
				t.Fatalf("node %d still held by %q after Release", i, o)
			}
		}
	})

	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[2].set(func(f *fakeNode) { f.delay = 1500 * time.Millisecond })
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if res.Err != nil || res.Hold == nil {
			t.Fatalf("attempt: %v", res.Err)
		}
		w.nodes[0].pause()
		w.nodes[1].pause()
		<-res.Hold.Lost()
		time.Sleep(4 * time.Second) // node 2's grant, then its rollback
		synctest.Wait()
		if _, _, ops := w.nodes[2].state(); count(ops, "rollback A") != 1 {
			t.Fatalf("node 2 ops %v: a late grant of a lost hold was not rolled back", ops)
		}
		if o := w.owners(); o[2] != "" {
			t.Fatalf("owners %v after the rollback", o)
		}
		w.nodes[0].resume()
		w.nodes[1].resume()
	})
}

// Holds renewed in one round each wait for their own deadline. A renewal
// that a busy node confirms after another hold's deadline, and before its
// own, keeps its hold. (The round stopped waiting for every hold at the
// earliest deadline among them; the hold then renewed again behind its
// first renewal, and was lost.)
func TestARenewalRoundWaitsForEachHoldsOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.multi = map[string]bool{} })
		}
		// Both renewals are due at 1 s: A's deadline is near 3 s, B's near 2 s.
		a := w.mustHold(t, "A", 3*time.Second)
		time.Sleep(500 * time.Millisecond)
		b := w.mustHold(t, "B", 1500*time.Millisecond)
		time.Sleep(400 * time.Millisecond)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.delay = 1500 * time.Millisecond }) // answers at 2.5 s
		}
		<-b.Lost()
		time.Sleep(400 * time.Millisecond)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.delay = 0 }) // before A's first renewal is confirmed
		}
		time.Sleep(3 * time.Second)
		if !a.Valid() {
			t.Fatalf("A lost (%v): its renewal was confirmed before its deadline", a.Err())
		}
		if err := a.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// While renewals and releases are queued on a quorum of nodes, acquire
// attempts wait in one line and enter in the order they arrived, once the
// backlog is gone. An attempt that may not wait (TryAcquire's) fails
// within NodeTimeout with an error that Is ErrBusy, and sends nothing.
func TestAttemptsWaitInLineWhileRenewalsGoFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.multi, f.backlog = map[string]bool{}, 1000 })
			f.pause()
		}
		const n = 10
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				s := w.spec(fmt.Sprint("T", i), time.Second)
				s.Wait = true
				if res := w.e.Attempt(t.Context(), s); res.Err != nil {
					errs[i] = res.Err
				} else {
					res.Hold.Release(context.Background())
				}
			})
			time.Sleep(time.Millisecond) // arrival order
		}
		res := w.e.Attempt(t.Context(), w.spec("try", time.Second))
		if !errors.Is(res.Err, nodeactor.ErrBusy) || !errors.Is(res.Err, ErrQuorumUnavailable) {
			t.Errorf("an attempt that may not wait on busy nodes: %v, want ErrQuorumUnavailable wrapping ErrBusy", res.Err)
		}
		time.Sleep(200 * time.Millisecond)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.backlog = 0 })
			f.resume()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("attempt %d: %v", i, err)
			}
		}
		// Each node ran the acquires in arrival order. A node may miss
		// some: an attempt won on the others is released before its
		// request there is sent (the release drops it), which a loaded
		// machine makes happen. Each ran on a quorum.
		ran := make([]int, n)
		for x, f := range w.nodes {
			_, _, ops := f.state()
			last := -1
			for _, op := range ops {
				id, ok := strings.CutPrefix(op, "acquire ")
				if !ok {
					continue
				}
				i, err := strconv.Atoi(strings.TrimPrefix(id, "T"))
				if err != nil || !strings.HasPrefix(id, "T") {
					t.Fatalf("node %d ran acquire %q: the refused attempt's request was sent", x, id)
				}
				if i <= last {
					t.Errorf("node %d ran the acquires out of arrival order: T%d after T%d (ops %v)", x, i, last, ops)
				}
				last = i
				ran[i]++
			}
		}
		for i, k := range ran {
			if k < 2 {
				t.Errorf("T%d ran on %d nodes, want a quorum", i, k)
			}
		}
	})
}

// Renewals confirmed late, by nodes that answer, hold new acquires back
// for a while: each new lease would add renewals to nodes already behind.
// An attempt that may not wait fails with ErrBusy meanwhile; once the
// renewals are on time again, attempts enter.
func TestLateRenewalsHoldAcquiresBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.multi = map[string]bool{} })
		}
		a := w.mustHold(t, "A", 3*time.Second) // renewed at 1 s
		time.Sleep(900 * time.Millisecond)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.delay = 800 * time.Millisecond }) // confirmed at 1.8 s
		}
		time.Sleep(950 * time.Millisecond)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.delay = 0 })
		}
		res := w.e.Attempt(t.Context(), w.spec("B", time.Second))
		if !errors.Is(res.Err, nodeactor.ErrBusy) {
			t.Fatalf("an attempt right after late renewals: %v, want ErrBusy", res.Err)
		}
		time.Sleep(time.Second)
		b := w.mustHold(t, "C", time.Second)
		if err := b.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
