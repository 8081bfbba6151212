package nodeactor_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// The arming pipeline reads the identity on the connection that loads the
// armed scripts: a node that restarted since its evaluation is flushed and
// refused (ErrIdentityChanged), never armed for the old identity. An armed
// acquire on an unarmed node is a refusal wrapping ErrNodeGuarded.
func TestArmRefusesAnotherIdentity(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := guardedActor(t, s)
	if !a.Guarded() {
		t.Fatal("a real server with Options.Guard is not guarded")
	}
	ctx := context.Background()
	look := func() nodeactor.Look { t.Helper(); return lookNow(t, a) }
	probe := nodeactor.NewScript("guard-test", "return 7")
	call := nodeactor.Call{Script: probe, Armed: true}
	if rep := a.Do(ctx, nodeactor.Normal, call); !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
		t.Fatalf("armed call on an unarmed node: %v, want ErrNodeGuarded", rep.Err)
	}
	lk := look()
	if lk.Marked || lk.Identity == "" || lk.Horizon >= 0 {
		t.Fatalf("fresh node: %+v", lk)
	}
	if err := a.Arm(ctx, "", lk.Identity); err != nil {
		t.Fatalf("Arm: %v", err)
	}
	if lk2 := look(); !lk2.Marked || lk2.Missing != 0 {
		t.Fatalf("after Arm: %+v", lk2)
	}
	if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
		t.Fatalf("armed call on an armed node: %v", rep.Err)
	}
	// the node restarts between the decision and the load
	s.RestartEmpty()
	var err error
	testutil.Eventually(5*time.Second, func() bool {
		err = a.Arm(ctx, "", lk.Identity)
		return errors.Is(err, nodeactor.ErrIdentityChanged)
	})
	if !errors.Is(err, nodeactor.ErrIdentityChanged) {
		t.Fatalf("Arm after a restart: %v, want ErrIdentityChanged", err)
	}
	if lk3 := look(); lk3.Marked || lk3.Identity == lk.Identity {
		t.Fatalf("after a refused Arm: %+v (old identity %s)", lk3, lk.Identity)
	}
	if rep := a.Do(ctx, nodeactor.Normal, call); !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
		t.Fatalf("armed call after the restart: %v, want ErrNodeGuarded", rep.Err)
	}
}

var (
	fixedProbe  = nodeactor.NewFixedScript("guard-test-fixed", "return {KEYS[1], ARGV[1], #KEYS, #ARGV}")
	copiedProbe = nodeactor.NewScript("guard-test-copied", "return {KEYS[1], ARGV[1], #KEYS, #ARGV}")
)

// A fixed script's armed copy checks the arm key as every armed copy
// does, and leaves the arm key and identity in KEYS and ARGV (uncopied)
// where another script's copy hides them: once the arm key is gone (a
// FLUSHALL), both answer ErrNodeGuarded.
func TestFixedScriptArmedCopyChecksTheArmKey(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := guardedActor(t, s)
	ctx := context.Background()
	var lk nodeactor.Look
	var err error
	if !testutil.Eventually(5*time.Second, func() bool { lk, err = a.Look(ctx, "redlock:{guard}:horizon"); return err == nil }) {
		t.Fatalf("Look: %v", err)
	}
	if err := a.Arm(ctx, "", lk.Identity); err != nil {
		t.Fatalf("Arm: %v", err)
	}
	for _, c := range []struct {
		script *nodeactor.Script
		want   string
	}{{fixedProbe, "k v 2 2"}, {copiedProbe, "k v 1 1"}} {
		rep := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: c.script, Keys: []string{"k"}, Args: []string{"v"}, Armed: true})
		if rep.Err != nil {
			t.Fatalf("%s armed on an armed node: %v", c.script.Name, rep.Err)
		}
		got, _ := rep.Msg.ToArray()
		var parts []string
		for _, m := range got {
			if v, err := m.ToString(); err == nil {
				parts = append(parts, v)
			} else if n, err := m.AsInt64(); err == nil {
				parts = append(parts, strconv.FormatInt(n, 10))
			}
		}
		if g := strings.Join(parts, " "); g != c.want {
			t.Errorf("%s armed: %q, want %q", c.script.Name, g, c.want)
		}
	}
	if _, err := s.Do("DEL", "redlock:{guard}:armed"); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []*nodeactor.Script{fixedProbe, copiedProbe} {
		rep := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: sc, Keys: []string{"k"}, Args: []string{"v"}, Armed: true})
		if !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
			t.Errorf("%s armed, arm key gone: %v, want ErrNodeGuarded", sc.Name, rep.Err)
		}
	}
}

// lookNow is a's Look of the default prefix's horizon, retried for up to
// 5 s while it fails (a connection still coming up).
func lookNow(t testing.TB, a *nodeactor.Actor) nodeactor.Look {
	t.Helper()
	var lk nodeactor.Look
	var err error
	if !testutil.Eventually(5*time.Second, func() bool { lk, err = a.Look(context.Background(), "redlock:{guard}:horizon"); return err == nil }) {
		t.Fatalf("Look: %v", err)
	}
	return lk
}

var countProbe = nodeactor.NewScript("guard-count-test", "return 1")

// Status counts the node guard's own scripts as the actor sends them: a
// look's, an arming's, and each call marked Guard (a check also in
// GuardChecks). The server ran exactly those, and one unmarked call.
func TestStatusCountsTheGuardsScripts(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := guardedActor(t, s)
	ctx := context.Background()
	scripts := func() int64 {
		t.Helper()
		info, err := s.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		for line := range strings.Lines(info) {
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if rest, ok := strings.CutPrefix(line, cmd); ok {
					v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
					n += v
				}
			}
		}
		return n
	}
	ran, st := scripts(), a.Status()
	lk := lookNow(t, a)
	if err := a.Arm(ctx, "", lk.Identity); err != nil {
		t.Fatalf("Arm: %v", err)
	}
	for _, c := range []nodeactor.Call{
		{Script: countProbe, Guard: nodeactor.GuardScript},
		{Script: countProbe, Armed: true, Guard: nodeactor.GuardCheck},
		{Script: countProbe},
	} {
		if rep := a.Do(ctx, nodeactor.Normal, c); rep.Err != nil {
			t.Fatalf("%+v: %v", c, rep.Err)
		}
	}
	now := a.Status()
	guard, checks := now.GuardScripts-st.GuardScripts, now.GuardChecks-st.GuardChecks
	if d := scripts() - ran; guard < 4 || checks != 1 || d != guard+1 {
		t.Errorf("the server ran %d scripts; the actor counts %d of the guard's (want at least a look, an arming and 2 calls), %d checks (want 1)",
			d, guard, checks)
	}
}

// An armed call that a lane sends before the keeper's probe has decided
// whether the guard applies goes armed: before this process has looked at
// the node, the node grants nothing that counts. Here the probe is held
// in the network (its native-command probe) and the call goes out behind
// it; unarmed, it would run and write.
func TestArmedCallBeforeTheProbeIsRefused(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	p.Capture(true)
	probe := p.Hold(nodeactor.DefaultProbeKey)
	defer probe.Release()
	a := start(t, p.Addr(), func(o *nodeactor.Options) { o.Guard = "redlock:" })
	probe.Await(t, "the probe")
	write := nodeactor.NewScript("pre-probe-write", "redis.call('SET', KEYS[1], 'x') return 1")
	got := make(chan nodeactor.Reply, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got <- a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: write, Armed: true, Keys: []string{"pre-probe"}})
	}()
	testutil.WaitFor(t, 5*time.Second, "the call sent behind the held probe", func() bool { return len(p.Captured("EVALSHA")) > 0 })
	probe.Release()
	rep := <-got
	if !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
		t.Errorf("an armed call sent before the probe: %v %v, want ErrNodeGuarded", rep.Msg, rep.Err)
	}
	if v, _ := s.Do("EXISTS", "pre-probe"); v != "0" {
		t.Errorf("the call wrote on a node this process had not looked at (EXISTS %s)", v)
	}
}
