package primitives_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// These tests hold back one chosen request in a proxy: a waiter W's
// enqueuing attempt to a node is delayed past NodeTimeout (the node refuses
// it late and records it for a direct grant), and the rollback the engine
// then sends there is held in the network. A release grants W the lock
// directly; only then does the held rollback reach the node. It must not
// undo the grant (docs/lock.md, "Direct grant", "Why it is safe").

// lateRollbackCase is one case of TestDirectGrantSurvivesLateRollback.
type lateRollbackCase struct {
	name string
	slow []int // nodes whose link to W holds the rollback back
	down int   // a node down throughout (-1: none)
}

func TestDirectGrantSurvivesLateRollback(t *testing.T) {
	testutil.RequireRedis(t)
	for _, tc := range []lateRollbackCase{
		{"third node down, one slow link", []int{0}, 2},
		{"all up, one slow link", []int{0}, -1},
		{"all up, two slow links", []int{0, 1}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The case needs W's latest attempt at the handoff to be the
			// delayed one on each slow node. Under load W can retry first
			// (its attempts reach a slow node once the client replaced the
			// stuck connection): the case is then set up again.
			testkit.UntilReached(t, 4, func() bool { return lateRollbackTry(t, tc) })
		})
	}
}

// lateRollbackTry runs tc once. It reports false, having undone what it
// set up, if the interleaving was not reached; the test's checks fail it.
func lateRollbackTry(t *testing.T, tc lateRollbackCase) bool {
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	name := "dgkeep"
	pw, paddrs := testkit.Proxied(t, addrs)
	ch := newCoord(t, addrs)
	// GuardOff: with the guard, W confirms a direct grant by an
	// armed round, which the held link stalls; W then takes the
	// lock by an attempt and the case is not reached.
	cw := newCoord(t, paddrs, func(cfg *coordinator.Config) {
		cfg.NodeTimeout = testkit.DirectNodeTimeout
		cfg.NodeGuard = coordinator.GuardOff
	})
	lh, _ := primitives.NewLock(ch, name, primitives.WithTTL(10*time.Second))
	lw, _ := primitives.NewLock(cw, name, primitives.WithTTL(3*time.Second), primitives.WithLabel("w"))
	if tc.down >= 0 {
		srv[tc.down].Kill()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The case needs H's key on every node up: under load H can win by
	// two nodes while its copy to the third lands after W's attempt there,
	// which is then granted outright, not queued (a hog run failed all
	// four tries so, "the delayed attempt never ran").
	var up []*testutil.Server
	for i, s := range srv {
		if i != tc.down {
			up = append(up, s)
		}
	}
	h := testkit.TakeOn(ctx, t, lh, up)
	held := map[int]testkit.DelayedAttempt{}
	for _, i := range tc.slow {
		held[i] = testkit.HoldRollback(pw[i], testkit.ProcOf(cw))
	}
	type acquired struct {
		lease *primitives.Lease
		err   error
	}
	got := make(chan acquired, 1)
	go func() {
		lease, err := lw.Acquire(ctx)
		got <- acquired{lease, err}
	}()
	var w *primitives.Lease
	again := func(why string) bool {
		t.Logf("not reached: %s; again", why)
		for _, hd := range held {
			hd.Rollback.Release()
		}
		h.Release(context.Background())
		if w == nil {
			cancel()
			w = (<-got).lease
		}
		if w != nil {
			w.Release(context.Background())
		}
		return false
	}
	for i, hd := range held {
		testkit.AwaitCaught(t, hd.Rollback, "node "+strconv.Itoa(i))
	}
	// The delayed attempt ran on each slow node: it is queued there.
	testkit.QueuedOnOnce(t, srv, name, tc.slow...)
	for i, hd := range held {
		if err := hd.Ran(srv[i], name); err != nil {
			return again(fmt.Sprintf("node %d: %v", i, err))
		}
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("W: %v", r.err)
	}
	w = r.lease
	defer w.Release(context.Background())
	// Each slow node granted W directly. Under load W can have
	// retried with an attempt that the held connection kept from
	// the slow node: that node's grant is then under the earlier
	// attempt's token, not the lease's, and the rollback must keep
	// it all the same (W's release frees it).
	before, retried := map[int]string{}, map[int]bool{}
	for _, i := range tc.slow {
		v := testkit.NodeValue(srv[i], name)
		if !strings.HasPrefix(v, "rl1:L:") || !strings.HasSuffix(v, "~d") || !strings.Contains(v, "~w~") {
			return again(fmt.Sprintf("node %d: %q before the rollback, not a direct grant to W", i, v))
		}
		if !strings.Contains(v, w.Token()) {
			t.Logf("node %d: the direct grant is under an earlier attempt's token (W retried)", i)
			retried[i] = true
		}
		before[i] = v
	}
	// The held rollbacks have not run: each node logs it when it does.
	logs := map[int]*testkit.RanLog{}
	for i := range held {
		logs[i] = testkit.LogRan(t, srv[i])
	}
	for _, hd := range held {
		hd.Rollback.Release()
	}
	for i, l := range logs {
		l.AwaitRan(t, "rollback", 1, fmt.Sprintf("the held rollback to run on node %d", i))
	}
	// The rollback must leave W holding the node. The grant is kept
	// as it was, or (W retried) W's newer attempt, held behind the
	// rollback on the same connection, re-grants it under the
	// lease's token. A rollback that undid the grant leaves the key
	// missing or reserved ("rl1:R:").
	// When W retried, its newer attempt's late grant there can also be
	// rolled back by W itself: that attempt had lost (W holds by the
	// other nodes' direct grants), and a rollback by W's own waiter
	// leaves the node reserved for W (lock.lua's free, id == self),
	// which W's release frees. No one else can take it meanwhile.
	for _, i := range tc.slow {
		v := testkit.NodeValue(srv[i], name)
		kept := v == before[i] || strings.HasPrefix(v, "rl1:L:") && strings.Contains(v, w.Token())
		reservedForW := retried[i] && strings.HasPrefix(v, "rl1:R:") && len(v) >= 14 && strings.Contains(before[i], "~"+v[6:14]+"~d")
		if !kept && !reservedForW {
			t.Errorf("node %d: %q after the late rollback; want W's direct grant %q kept", i, v, before[i])
		}
	}
	// W's lease is renewed past its first Deadline: its renewals
	// found their keys.
	first := w.Deadline()
	if !testutil.Eventually(10*time.Second, func() bool { return !w.Valid() || w.Deadline().After(first) }) || !w.Valid() {
		t.Errorf("W's lease not renewed past its deadline %s (valid %v at %s): %v", first.Format("15:04:05.000"),
			w.Valid(), time.Now().Format("15:04:05.000"), w.Err())
	}
	if err := w.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
	testkit.NoKeyLeft(t, srv, name, tc.down)
	return true
}

// The interleaving that lets a second holder in: a waiter Y queued before
// W, then froze until its entries expired; W is granted directly on two
// nodes while the third is down; the third comes back empty, Y thaws and
// queues again ahead of W; then W's held rollback reaches node 0. Node 0
// must stay W's, so Y cannot win {0, 2} while W is valid.
func TestDirectGrantLateRollbackLetsNoSecondHolderIn(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const name = "dgsecond"
	pw, wAddrs := testkit.Proxied(t, addrs)
	py, yAddrs := testkit.Proxied(t, addrs)
	fast := func(cfg *coordinator.Config) { cfg.NodeTimeout = testkit.DirectNodeTimeout }
	ch, cw, cy := newCoord(t, addrs), newCoord(t, wAddrs, fast), newCoord(t, yAddrs, fast)
	lh, _ := primitives.NewLock(ch, name, primitives.WithTTL(20*time.Second))
	lw, _ := primitives.NewLock(cw, name, primitives.WithTTL(6*time.Second), primitives.WithLabel("w"))
	// Y's short TTL makes its queue entries expire soon after it froze.
	ly, _ := primitives.NewLock(cy, name, primitives.WithTTL(time.Second), primitives.WithLabel("y"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	srv[2].Kill()
	h := testkit.Take(ctx, t, lh)
	yctx, ycancel := context.WithCancel(ctx)
	defer ycancel()
	ygot := make(chan *primitives.Lease, 1)
	go func() {
		lease, _ := ly.Acquire(yctx)
		ygot <- lease
	}()
	headOf := func(i int) (wid string, live bool) {
		m, err := srv[i].Do("ZRANGE", testkit.LockKey(name, "q"), "0", "0")
		m = strings.Trim(m, "[]")
		if err != nil || m == "" || m == testutil.NilReply {
			return "", false
		}
		exp, _ := srv[i].Do("HGET", testkit.LockKey(name, "qx"), m)
		e, _ := strconv.ParseInt(exp, 10, 64)
		return m, e > testkit.ServerMs(t, srv[i])
	}
	var ywid string
	if !testutil.Eventually(5*time.Second, func() bool {
		a, okA := headOf(0)
		b, okB := headOf(1)
		ywid = a
		return okA && okB && a == b
	}) {
		t.Fatal("Y never queued")
	}
	for _, p := range py {
		p.SetFault(testutil.Blackhole) // Y freezes (its connections stay open)
	}
	// Y's entries expire (its TTL + 3 s): W will be the live head at the
	// release.
	if !testutil.Eventually(15*time.Second, func() bool {
		_, a := headOf(0)
		_, b := headOf(1)
		return !a && !b
	}) {
		t.Fatal("Y's queue entries never expired")
	}
	// W queues; the rollback of its attempt on node 0 is held from here on
	// (its connection must not stay blocked past the client's write
	// timeout: the rest runs in a few seconds).
	rb := testkit.HoldRollbackGuarded(pw[0], testkit.ProcOf(cw))
	wgot := testkit.AcquireAsync(ctx, t, lw)
	testkit.AwaitCaught(t, rb.Rollback, "node 0")
	if !testutil.Eventually(5*time.Second, func() bool {
		v, _ := srv[0].Do("ZRANGE", testkit.LockKey(name, "q"), "0", "-1")
		return strings.Contains(v, "~w~")
	}) {
		t.Fatal("W never queued on node 0")
	}
	granted := time.Now() // H's release grants W directly
	w := testkit.HandOver(ctx, t, h, wgot)
	defer w.Release(context.Background())
	srv[2].Restart() // empty: it never had anyone's key
	for _, p := range py {
		p.SetFault(testutil.Pass) // Y thaws and queues again, ahead of W
	}
	if !testutil.Eventually(10*time.Second, func() bool { a, ok := headOf(0); return ok && a == ywid }) {
		t.Fatal("Y never queued again ahead of W on node 0")
	}
	rb.Rollback.Release()
	select {
	case y := <-ygot:
		if y != nil {
			defer y.Release(context.Background())
			if testutil.ValidPastStep(t, w, granted) && y.Valid() {
				t.Fatalf("S1 violated: W (fence %d) and Y (fence %d) both Valid; node values %q %q %q", w.Fence(), y.Fence(),
					testkit.NodeValue(srv[0], name), testkit.NodeValue(srv[1], name), testkit.NodeValue(srv[2], name))
			}
		}
	case <-time.After(3 * time.Second):
	}
	if !w.Valid() {
		t.Fatalf("W lost its lease: %v", w.Err())
	}
	if v := testkit.NodeValue(srv[0], name); !strings.Contains(v, w.Token()) {
		t.Fatalf("node 0: %q; want W's grant kept", v)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Now Y gets its turn.
	select {
	case y := <-ygot:
		if y == nil {
			t.Fatal("Y's Acquire failed")
		}
		y.Release(ctx)
	case <-time.After(15 * time.Second):
		t.Fatal("Y never acquired after W's release")
	}
}

// A grant by reply of W's attempt that arrives after W held by that
// attempt's direct grants elsewhere is not part of W's lease (whose token
// is the direct grant's): it is rolled back, and nothing is left once W
// releases. Node 2 restarted empty (it never had H's key), so it grants
// W's attempt, whose copy there is delayed; meanwhile nodes 0 and 1 refuse
// it, H releases and they grant W directly.
func TestDirectGrantLateReplyGrantLeavesNothing(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const name = "dglate"
	pw, paddrs := testkit.Proxied(t, addrs)
	ch := newCoord(t, addrs)
	cw := newCoord(t, paddrs, func(cfg *coordinator.Config) { cfg.NodeTimeout = time.Second })
	lh, _ := primitives.NewLock(ch, name, primitives.WithTTL(10*time.Second))
	lw, _ := primitives.NewLock(cw, name, primitives.WithTTL(6*time.Second), primitives.WithLabel("w"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// W waits once, so that its next Acquire queues at once (no lone first
	// attempt whose rollback on node 2 would race with the one we delay).
	h := testkit.Take(ctx, t, lh)
	warm := testkit.AcquireAsync(ctx, t, lw)
	testkit.QueuedOnEveryNode(t, func() []primitives.NodeState { return lh.Status(ctx) }, "w")
	h.Release(ctx)
	if w := <-warm; w == nil {
		t.FailNow()
	} else {
		w.Release(ctx)
	}
	srv[2].Kill()
	h = testkit.Take(ctx, t, lh)
	srv[2].Restart()
	// The reply comes within NodeTimeout, after the attempt was decided.
	d := pw[2].Delay(700*time.Millisecond, "$7\r\nacquire\r\n", testkit.ProcOf(cw))
	got := testkit.AcquireAsync(ctx, t, lw)
	testkit.AwaitCaught(t, d, "node 2")
	for _, i := range []int{0, 1} {
		if !testutil.Eventually(5*time.Second, func() bool {
			v, _ := srv[i].Do("HGETALL", testkit.LockKey(name, "qx"))
			return strings.Contains(v, "~w~") && strings.Contains(v, " W ")
		}) {
			t.Fatalf("W's attempt never refused on node %d", i)
		}
	}
	w := testkit.HandOver(ctx, t, h, got)
	defer w.Release(context.Background())
	// The late grant on node 2 lands and is rolled back (asynchronously).
	if !testutil.Eventually(5*time.Second, func() bool { return !strings.Contains(testkit.NodeValue(srv[2], name), w.Token()) }) {
		t.Errorf("node 2: %q: a late grant that no lease renews was kept", testkit.NodeValue(srv[2], name))
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(5*time.Second, func() bool {
		for i := range srv {
			if testkit.NodeValue(srv[i], name) != "" {
				return false
			}
		}
		return true
	}) {
		t.Errorf("left after W's release: %q %q %q", testkit.NodeValue(srv[0], name), testkit.NodeValue(srv[1], name), testkit.NodeValue(srv[2], name))
	}
}
