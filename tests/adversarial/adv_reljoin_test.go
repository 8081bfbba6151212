package adversarial_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Adversarial tests of joined releases (docs/architecture.md, "Joined
// releases"): a lane joins the Lock releases (Mark) or rollbacks of one
// batch into one EVALSHA of scripts.LockReleaseMany, each element with
// the arm key and the identity its handoff's mark compares.
//
// The attacks: a node that forgot (arm key deleted, arm key of another
// identity, script cache flushed) while the joined call waits in the
// network must never publish a marked `G:` grant; one element's mark
// inputs, error or state must not leak into a neighbour; the joined call
// resent or delivered late (reply dropped, connection reset, a replayed
// copy) must not undo a later holder's lease.

// markingManySHA is the SHA1 of LockReleaseMany's marking copy for
// identity under the default key prefix (nodeactor's markedFor).
func markingManySHA(identity string) string {
	h := sha1.Sum([]byte(markingManyBody(identity)))
	return hex.EncodeToString(h[:])
}

func markingManyBody(identity string) string {
	return strings.Replace(scripts.LockReleaseMany, nodeactor.MarkLine, advMarkCheck, 1) +
		"\n-- redlock guard redlock:\n-- marked for " + identity + "\n"
}

// relJoin is one node behind a proxy. H's coordinator (ch) goes through
// the proxy, W's (cw) does not. A blocker lease (ch) lets the test stop
// ch's lane (its renewal held by the proxy); k names are each held by an
// H (ch) with a W (cw) queued for it, so each release hands off directly.
type relJoin struct {
	t       *testing.T
	srv     *testutil.Server
	p       *testutil.Proxy
	ch, cw  *coordinator.Coordinator
	blocker *primitives.Lease
	prefix  string
	hs      []*primitives.Lease
	gots    []chan *primitives.Lease
	sn      *testkit.GrantSniffer
}

func (r *relJoin) name(i int) string { return r.prefix + strconv.Itoa(i) }

func newRelJoin(t *testing.T, prefix string, k int) *relJoin {
	t.Helper()
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, srv.Addr())
	slow := func(c *coordinator.Config) { c.DefaultTTL, c.NodeTimeout = 10*time.Second, 3*time.Second }
	r := &relJoin{t: t, srv: srv, p: p, prefix: prefix}
	r.ch = testkit.NewCoord(t, []string{p.Addr()}, slow)
	r.cw = testkit.NewCoord(t, []string{srv.Addr()}, slow)
	testkit.WaitAllUp(t, r.ch)
	testkit.WaitAllUp(t, r.cw)
	lb, _ := primitives.NewLock(r.ch, "blocker", primitives.WithTTL(10*time.Second), primitives.WithAutoRenew(false))
	var err error
	if r.blocker, err = lb.TryAcquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.blocker.Release(context.Background()) })
	for i := range k {
		lh, _ := primitives.NewLock(r.ch, r.name(i), primitives.WithTTL(10*time.Second), primitives.WithAutoRenew(false))
		lw, _ := primitives.NewLock(r.cw, r.name(i), primitives.WithTTL(10*time.Second), primitives.WithAutoRenew(false))
		h, got := testkit.HoldAndWait(t, lh, lw, 40*time.Second)
		r.hs, r.gots = append(r.hs, h), append(r.gots, got)
		testkit.QueuedOnAll(t, []*testutil.Server{srv}, r.name(i))
	}
	if id := r.ch.Nodes()[0].Identity; id == "" || !testutil.Eventually(5*time.Second, func() bool {
		return testkit.Admin(t, srv, "SCRIPT", "EXISTS", markingManySHA(advIdentity(t, srv))) == "[1]"
	}) {
		t.Fatalf("the node is not armed with the joined release's marking copy (identity %q)", id)
	}
	r.sn = testkit.SniffGrants(t, srv, prefix+"*")
	return r
}

// releaseJoined stops ch's lane, queues every H's Release behind it, runs
// attack (the lane still stopped), and lets the lane go: the releases go
// as one joined call. It returns each Release's error (in a channel: an
// attack may keep them from returning at once).
func (r *relJoin) releaseJoined(attack func()) <-chan []error {
	r.t.Helper()
	held := r.p.Hold("{blocker}")
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.blocker.Extend(context.Background(), 10*time.Second)
	}()
	held.Await(r.t, "the blocker's renewal at the proxy")
	r.p.Capture(true)
	errs := make([]error, len(r.hs))
	var wg sync.WaitGroup
	base := testkit.Backlog(r.ch, 0)
	for i, h := range r.hs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = h.Release(context.Background()) }()
	}
	testutil.WaitFor(r.t, 10*time.Second, "the releases to queue behind the held renewal", func() bool {
		return testkit.Backlog(r.ch, 0) >= base+len(r.hs)
	})
	if attack != nil {
		attack()
	}
	held.Release()
	out := make(chan []error, 1)
	go func() { wg.Wait(); <-done; out <- errs }()
	return out
}

// joinedChunk returns the captured chunk of the joined release call (it
// names the first two names and "release").
func (r *relJoin) joinedChunk() []byte {
	r.t.Helper()
	var got []byte
	testutil.Eventually(5*time.Second, func() bool {
		cs := r.p.Captured("{"+r.name(0)+"}", "{"+r.name(1)+"}", "$7\r\nrelease\r\n")
		if len(cs) > 0 {
			got = cs[0]
		}
		return got != nil
	})
	if got == nil {
		r.t.Fatal("no captured chunk carries the releases of two names: they were not joined")
	}
	return got
}

// waiters waits (within d) for every W and returns their leases (nil for
// one that did not hold).
func (r *relJoin) waiters(d time.Duration) []*primitives.Lease {
	out := make([]*primitives.Lease, len(r.gots))
	deadline := time.After(d)
	for i, got := range r.gots {
		select {
		case out[i] = <-got:
		case <-deadline:
			return out
		}
	}
	return out
}

// checkKeys asserts that each W that holds is the holder of its key on the
// node (a second holder's key, or none, while W is Valid breaks S1).
func (r *relJoin) checkKeys(ws []*primitives.Lease, what string) {
	r.t.Helper()
	for i, w := range ws {
		if w == nil || !w.Valid() {
			continue
		}
		if v := testkit.NodeValue(r.srv, r.name(i)); !strings.Contains(v, w.Token()) {
			r.t.Errorf("%s: W %d is Valid (token %s) but the node's key is %q", what, i, w.Token(), v)
		}
	}
}

// TestRelAdvJoinedMarkControl: no attack. The joined call runs the marking
// copy of the element form (its SHA on the wire), every handoff is marked
// and every W holds. The attacks below are this scenario with a fault.
func TestRelAdvJoinedMarkControl(t *testing.T) {
	t.Parallel()
	const k = 4
	r := newRelJoin(t, "rjc", k)
	id := advIdentity(t, r.srv)
	errs := <-r.releaseJoined(nil)
	for i, err := range errs {
		if err != nil {
			t.Errorf("H %d's Release: %v", i, err)
		}
	}
	if c := r.joinedChunk(); !bytes.Contains(c, []byte(markingManySHA(id))) {
		t.Errorf("the joined call did not run the marking copy for %s: %q", id, c[:min(len(c), 200)])
	}
	ws := r.waiters(20 * time.Second)
	for i, w := range ws {
		if w == nil {
			t.Errorf("W %d never held", i)
		} else {
			defer w.Release(context.Background())
		}
	}
	r.checkKeys(ws, "control")
	testutil.Eventually(3*time.Second, func() bool { return len(r.sn.Got()) >= k })
	msgs := r.sn.Got()
	for _, m := range msgs {
		if !strings.HasPrefix(m, "G:"+id+":") {
			t.Errorf("a handoff of the joined call not marked for %s: %s", id, m)
		}
	}
	if len(msgs) < k {
		t.Errorf("%d grants published for %d handoffs: %q", len(msgs), k, msgs)
	}
}

// forgetJoined runs the scenario with forget applied while the joined call
// waits, and asserts that the node published no marked grant. It logs how
// long the Ws took (they may need the guard to arm the node again).
func forgetJoined(t *testing.T, prefix string, forget func(r *relJoin)) {
	const k = 4
	r := newRelJoin(t, prefix, k)
	id := advIdentity(t, r.srv)
	errsc := r.releaseJoined(func() { forget(r) })
	start := time.Now()
	ws := r.waiters(30 * time.Second)
	for i, w := range ws {
		if w != nil {
			defer w.Release(context.Background())
		} else {
			t.Logf("W %d did not hold within 30 s", i)
		}
	}
	t.Logf("Ws held after %s", time.Since(start).Round(time.Millisecond))
	r.checkKeys(ws, prefix)
	select {
	case errs := <-errsc:
		t.Logf("H's Releases: %v", errs)
	case <-time.After(15 * time.Second):
		t.Errorf("H's Releases never returned")
	}
	msgs := r.sn.Got()
	for _, m := range msgs {
		if strings.HasPrefix(m, "G:") {
			t.Errorf("mark safety: the node forgot, yet a joined release marked its handoff: %s", m)
		}
	}
	t.Logf("grants published: %q", msgs)
	switch c := r.p.Captured("{"+r.name(0)+"}", "{"+r.name(1)+"}", "$7\r\nrelease\r\n"); {
	case len(c) == 0:
		t.Logf("(the releases were not joined into one call)")
	case bytes.Contains(c[0], []byte(markingManySHA(id))):
		t.Logf("the joined call ran the marking copy for %s: the node's own check refused the marks", id)
	default:
		t.Logf("the joined call ran the plain element form (the actor saw the node forget first)")
	}
}

// TestRelAdvJoinedMarkArmKeyDeleted: the arm key is deleted while the
// joined marking call waits (built, or about to be, with the old
// identity): no element may mark.
func TestRelAdvJoinedMarkArmKeyDeleted(t *testing.T) {
	t.Parallel()
	forgetJoined(t, "rjd", func(r *relJoin) {
		testkit.Admin(t, r.srv, "DEL", testkit.ArmKey)
	})
}

// TestRelAdvJoinedMarkArmKeyOfAnotherIdentity: the arm key is rewritten to
// another identity (same run_id, another replid: a node that resynced)
// while the joined call waits: the element's identity no longer matches.
func TestRelAdvJoinedMarkArmKeyOfAnotherIdentity(t *testing.T) {
	t.Parallel()
	forgetJoined(t, "rjo", func(r *relJoin) {
		id := advIdentity(t, r.srv)
		run, _, _ := strings.Cut(id, "/")
		testkit.Admin(t, r.srv, "SET", testkit.ArmKey, run+"/"+strings.Repeat("0", 40))
	})
}

// TestRelAdvJoinedMarkNoscriptFallback: SCRIPT FLUSH while the joined
// marking call waits. Its EVALSHA answers NOSCRIPT and the lane falls back
// to EVAL of the plain element form: no handoff may be marked (unless the
// guard loaded the marking copy again before the call: then the node is
// armed again and the mark is the guard's; the test tells the two apart).
func TestRelAdvJoinedMarkNoscriptFallback(t *testing.T) {
	t.Parallel()
	const k = 4
	r := newRelJoin(t, "rjn", k)
	id := advIdentity(t, r.srv)
	errsc := r.releaseJoined(func() {
		testkit.Admin(t, r.srv, "SCRIPT", "FLUSH")
		testkit.Admin(t, r.srv, "CONFIG", "RESETSTAT")
	})
	ws := r.waiters(30 * time.Second)
	for _, w := range ws {
		if w != nil {
			defer w.Release(context.Background())
		}
	}
	r.checkKeys(ws, "noscript")
	select {
	case errs := <-errsc:
		t.Logf("H's Releases: %v", errs)
	case <-time.After(15 * time.Second):
		t.Errorf("H's Releases never returned")
	}
	stats := testkit.Admin(t, r.srv, "INFO", "commandstats")
	fellBack := strings.Contains(stats, "cmdstat_eval:")
	msgs := r.sn.Got()
	marked := 0
	for _, m := range msgs {
		if strings.HasPrefix(m, "G:") {
			marked++
		}
	}
	t.Logf("grants %q; EVAL ran: %v", msgs, fellBack)
	if marked > 0 {
		reloaded := testkit.Admin(t, r.srv, "SCRIPT", "EXISTS", markingManySHA(id)) == "[1]"
		if !reloaded {
			t.Errorf("mark safety: %d handoffs marked after SCRIPT FLUSH, and the marking copy is not cached: the fallback marked", marked)
		} else {
			t.Logf("%d marked, but the guard loaded the marking copy again (armed again): inconclusive run", marked)
		}
	}
	if !fellBack {
		t.Logf("(no EVAL ran: the fallback was not exercised)")
	}
	if c := r.p.Captured("{"+r.name(0)+"}", "{"+r.name(1)+"}", "$7\r\nrelease\r\n"); len(c) > 0 && bytes.Contains(c[0], []byte(markingManySHA(id))) {
		t.Logf("the joined call was sent as the marking copy's EVALSHA, and fell back")
	}
}

// TestRelAdvJoinedReleaseReplayedAfterHandoff: the joined marking call is
// replayed (a late copy, a resend after a reconnect) after the Ws hold by
// its handoffs, and again after the Ws released and new holders took the
// names. It must change nothing: each later holder keeps its key, and the
// replay publishes no grant.
func TestRelAdvJoinedReleaseReplayedAfterHandoff(t *testing.T) {
	t.Parallel()
	const k = 4
	r := newRelJoin(t, "rjr", k)
	errs := <-r.releaseJoined(nil)
	for i, err := range errs {
		if err != nil {
			t.Errorf("H %d's Release: %v", i, err)
		}
	}
	chunk := r.joinedChunk()
	ws := r.waiters(20 * time.Second)
	for i, w := range ws {
		if w == nil {
			t.Fatalf("W %d never held", i)
		}
	}
	testutil.Eventually(3*time.Second, func() bool { return len(r.sn.Got()) >= k })
	before := len(r.sn.Got())
	vals := make([]string, k)
	for i := range k {
		vals[i] = testkit.NodeValue(r.srv, r.name(i))
	}
	rep, err := r.p.Replay(chunk)
	t.Logf("replay after the handoff: %q %v", rep, err)
	// Its reply came: the node ran it. Any grant it published is
	// received once the sniffer's marker, published after, is.
	r.sn.Sync(t)
	for i := range k {
		if v := testkit.NodeValue(r.srv, r.name(i)); v != vals[i] {
			t.Errorf("the replayed joined release changed name %d's key: %q -> %q (W Valid: %v)", i, vals[i], v, ws[i].Valid())
		}
	}
	r.checkKeys(ws, "after the first replay")
	if got := r.sn.Got(); len(got) != before {
		t.Errorf("the replay published grants: %q", got[before:])
	}
	// the Ws release; new holders (TryAcquire, on cw) take every name
	for _, w := range ws {
		if err := w.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ns := make([]*primitives.Lease, k)
	for i := range k {
		l, _ := primitives.NewLock(r.cw, r.name(i), primitives.WithTTL(10*time.Second), primitives.WithAutoRenew(false))
		if ns[i], err = l.TryAcquire(context.Background()); err != nil {
			t.Fatalf("N %d: %v", i, err)
		}
		defer ns[i].Release(context.Background())
	}
	rep, err = r.p.Replay(chunk)
	t.Logf("replay after new holders: %q %v", rep, err)
	r.sn.Sync(t) // it ran (its reply came), and what it published is in
	r.checkKeys(ns, "after the second replay")
	for i, n := range ns {
		if !n.Valid() {
			t.Errorf("N %d is no longer Valid", i)
		}
	}
}

// TestRelAdvJoinedReleaseReplyLostConnectionReset: the joined release runs
// on the node, its reply is dropped, and the connection is reset: the
// lane (or rueidis) may send it again on a new connection, after the
// handoffs made the Ws holders. Nothing may undo a W's lease: its key stays
// its own while it is Valid, for the time any resend takes.
func TestRelAdvJoinedReleaseReplyLostConnectionReset(t *testing.T) {
	t.Parallel()
	const k = 4
	r := newRelJoin(t, "rjx", k)
	var joined *testutil.Held
	errsc := r.releaseJoined(func() {
		joined = r.p.Hold("{"+r.name(0)+"}", "{"+r.name(1)+"}", "$7\r\nrelease\r\n")
	})
	joined.Await(t, "the joined release at the proxy")
	r.p.SetFault(testutil.DropReplies)
	joined.Release()
	// it ran: every name is handed off on the node
	if !testutil.Eventually(10*time.Second, func() bool {
		for i := range k {
			if !strings.HasSuffix(testkit.NodeValue(r.srv, r.name(i)), "~d") {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the joined release never ran: %q", testkit.NodeValue(r.srv, r.name(0)))
	}
	r.p.SetFault(testutil.Reset)
	time.Sleep(100 * time.Millisecond)
	r.p.SetFault(testutil.Pass)
	ws := r.waiters(20 * time.Second)
	for i, w := range ws {
		if w == nil {
			t.Errorf("W %d never held", i)
		} else {
			defer w.Release(context.Background())
		}
	}
	select {
	case errs := <-errsc:
		t.Logf("H's Releases: %v", errs)
	case <-time.After(20 * time.Second):
		t.Errorf("H's Releases never returned")
	}
	for range 10 {
		r.checkKeys(ws, "after the reset")
		time.Sleep(200 * time.Millisecond)
	}
	n := 0
	for _, m := range r.sn.Got() {
		if strings.HasPrefix(m, "g:") || strings.HasPrefix(m, "G:") {
			n++
		}
	}
	if n != k {
		t.Errorf("%d grants published for %d handoffs (a resend granted again?): %q", n, k, r.sn.Got())
	}
}

// The element form's marking copy, run directly: each element's mark()
// reads its own arm key and identity. A neighbour that marks rightly must
// not make another element mark, nor one that fails make a later one
// fail; an element that raises (a fence counter at its maximum) is its
// own error and writes nothing, and its neighbours hand off. Then the
// same call replayed (a resend) answers and changes nothing.
func TestRelAdvMarkingElementsAreIndependent(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	id := advIdentity(t, srv)
	run, _, _ := strings.Cut(id, "/")
	forged := run + "/" + strings.Repeat("0", 40) // the run_id, another replid
	testkit.Admin(t, srv, "SET", testkit.ArmKey, id)
	other := "redlock:{guard}:armed2"
	testkit.Admin(t, srv, "SET", other, forged)
	sn := testkit.SniffGrants(t, srv, "rme*")
	nowMs := testkit.ServerMs(t, srv)
	type elem struct {
		armKey, ident string
		marks         bool
		poison        bool
	}
	es := []elem{
		{testkit.ArmKey, id, true, false},            // marks
		{testkit.ArmKey, "another-id", false, false}, // its identity is not the arm key's
		{other, forged, false, false},                // arm key holds it, the replid differs
		{testkit.ArmKey, id, true, false},            // marks again after two refusals
		{testkit.ArmKey, id, false, true},            // raises: fence counter at its max
		{testkit.ArmKey, id, true, false},            // marks after a raise
		{"redlock:{rme6}:lock", "", false, false},    // a call that marks nothing: its own key and ""
	}
	var keys, args []string
	for i, e := range es {
		name := fmt.Sprintf("rme%d", i)
		lk := func(s string) string { return testkit.LockKey(name, s) }
		testkit.Admin(t, srv, "SET", lk("lock"), "rl1:L:tok"+strconv.Itoa(i), "PX", "20000")
		wid := "w" + strconv.Itoa(i)
		testkit.Admin(t, srv, "ZADD", lk("q"), "1", wid)
		testkit.Admin(t, srv, "HSET", lk("qx"), wid, strconv.FormatInt(nowMs+20000, 10),
			"="+wid, "W 1 5000 60000 0 abcd tokw"+strconv.Itoa(i))
		if e.poison {
			testkit.Admin(t, srv, "SET", lk("fence"), "9223372036854775807")
		}
		for _, s := range scripts.LockKeys {
			keys = append(keys, lk(s))
		}
		keys = append(keys, e.armKey)
		args = append(args, scripts.LockRelease{Token: "tok" + strconv.Itoa(i), Window: 200 * time.Millisecond,
			Channel: lk("ch")}.Args()...)
		args = append(args, e.ident)
	}
	evalsha := func() string {
		cmd := []string{"EVAL", markingManyBody(id), strconv.Itoa(len(keys))}
		cmd = append(append(cmd, keys...), args...)
		out, err := srv.Do(cmd...)
		if err != nil {
			t.Fatalf("the joined call failed as a whole: %v", err)
		}
		return out
	}
	out := evalsha()
	t.Logf("answers: %s", out)
	testutil.Eventually(3*time.Second, func() bool { return len(sn.Got()) >= len(es)-1 })
	msgs := sn.Got()
	byName := map[string]string{}
	for _, m := range msgs {
		f := strings.Split(m, ":")
		byName[f[len(f)-1]] = m
	}
	for i, e := range es {
		name := fmt.Sprintf("rme%d", i)
		m, v := byName["w"+strconv.Itoa(i)], testkit.NodeValue(srv, name)
		switch {
		case e.poison:
			if m != "" || v != "rl1:L:tok"+strconv.Itoa(i) {
				t.Errorf("element %d raised, yet grant %q and key %q", i, m, v)
			}
		case e.marks:
			if !strings.HasPrefix(m, "G:"+id+":") {
				t.Errorf("element %d should mark for %s: %q", i, id, m)
			}
		default:
			if !strings.HasPrefix(m, "g:") {
				t.Errorf("mark safety: element %d (arm key %s, identity %q) published %q", i, e.armKey, e.ident, m)
			}
		}
		if !e.poison && v != "rl1:L:tokw"+strconv.Itoa(i)+"~d" {
			t.Errorf("element %d: key %q after its handoff", i, v)
		}
	}
	// a resend of the whole call: each element finds its handoff's holder
	before := len(sn.Got())
	vals := map[string]string{}
	for i := range es {
		vals[fmt.Sprint(i)] = testkit.NodeValue(srv, fmt.Sprintf("rme%d", i))
	}
	out = evalsha()
	t.Logf("answers to the resend: %s", out)
	sn.Sync(t) // it ran (EVAL answered); a grant it published is in
	for i := range es {
		if v := testkit.NodeValue(srv, fmt.Sprintf("rme%d", i)); v != vals[fmt.Sprint(i)] {
			t.Errorf("the resend changed element %d's key: %q -> %q", i, vals[fmt.Sprint(i)], v)
		}
	}
	if got := sn.Got(); len(got) != before {
		t.Errorf("the resend published: %q", got[before:])
	}
}
