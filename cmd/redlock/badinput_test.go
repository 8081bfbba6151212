package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// keysLeft returns the keys on s other than fence counters (kept after a
// release by design), after waiting a moment for a release's last node.
func keysLeft(t *testing.T, s *testutil.Server) []string {
	t.Helper()
	var left []string
	testutil.Eventually(2*time.Second, func() bool {
		left = left[:0]
		r, err := s.Do("KEYS", "*")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range strings.Fields(strings.Trim(r, "[]")) {
			// fence counters and the node guard's keys stay by design
			if !strings.HasSuffix(k, ":fence") && k != "redlock:{guard}:horizon" && k != "redlock:{guard}:armed" {
				left = append(left, k)
			}
		}
		return len(left) == 0
	})
	return left
}

// Bad input through the CLI: exit 2, one line on stderr that says
// "invalid argument" (the library's words) and names the flag or argument
// and what is allowed, and nothing left on the servers. The API's side is
// primitives' TestAPIBadInput.
func TestCLIBadInput(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	nodes := strings.Join(testutil.Addrs(srv), ",")
	env := []string{"REDLOCK_NODES=" + nodes, "REDLOCK_TLS_CA="}
	one := testutil.Addrs(srv)[0]
	run := func(args ...string) []string { return append([]string{"run"}, args...) }
	cases := []struct {
		name  string
		args  []string
		env   []string // instead of env
		words []string
	}{
		{"run --grace -1s", run("--key", "k", "--grace", "-1s", "--", "true"), nil, []string{"--grace -1s must not be negative", "0 sends SIGKILL at once"}},
		{"run --wait -1s", run("--key", "k", "--wait", "-1s", "--", "true"), nil, []string{"--wait -1s must not be negative"}},
		{"run --ttl 50ms", run("--key", "k", "--ttl", "50ms", "--", "true"), nil, []string{"TTL 50ms out of range [100ms, 24h0m0s] (--ttl)"}},
		{"run --ttl 5", run("--key", "k", "--ttl", "5", "--", "true"), nil, []string{`--ttl 5 has no unit: add one, e.g. "5s"`}},
		{"run --min-hold 90", run("--key", "k", "--min-hold", "90", "--", "true"), nil, []string{`--min-hold 90 has no unit: add one, e.g. "90s"`}},
		{"demo --duration 3", []string{"demo", "--duration", "3"}, nil, []string{`--duration 3 has no unit: add one, e.g. "3s"`}},
		{"torture --ttl=2", []string{"torture", "--ttl=2"}, nil, []string{`--ttl 2 has no unit: add one, e.g. "2s"`}},
		{"run --ttl 48h", run("--key", "k", "--ttl", "48h", "--", "true"), nil, []string{"TTL 48h0m0s out of range [100ms, 24h0m0s] (--ttl)"}},
		{"run --key with braces", run("--key", "a{b}", "--", "true"), nil, []string{`"a{b}" must not contain '{' or '}' (--key)`}},
		{"run without --key", run("--", "true"), nil, []string{"--key is required"}},
		{"run without a command", run("--key", "k"), nil, []string{"no command given (put it after --)"}},
		{"run without nodes", run("--key", "k", "--", "true"), []string{"REDLOCK_NODES="}, []string{"no nodes: pass --nodes"}},
		{"run --nodes redis://", run("--key", "k", "--nodes", "redis://", "--", "true"), nil, []string{"node 0", "no host"}},
		{"run --nodes ?protocol=7", run("--key", "k", "--nodes", "redis://"+one+"?protocol=7", "--", "true"), nil, []string{"protocol=7: want 2 (RESP2) or 3"}},
		{"run --nodes ?master_set=", run("--key", "k", "--nodes", "redis://"+one+"?master_set=", "--", "true"), nil,
			[]string{"master_set is empty"}},
		{"run --nodes host:99999", run("--key", "k", "--nodes", "localhost:99999", "--", "true"), nil, []string{`"localhost:99999" is not host:port`}},
		{"run --label with a space", run("--key", "k", "--label", "a b", "--", "true"), nil, []string{"label", "not printable ASCII, or is a space"}},
		{"status a b", []string{"status", "a", "b"}, nil, []string{`one NAME expected, got 2 (["a" "b"])`}},
		{"status a --json b", []string{"status", "a", "--json", "b"}, nil, []string{"one NAME expected, got 2"}},
		{"status without a name", []string{"status"}, nil, []string{"no NAME given (redlock status NAME)"}},
		{"status --kind bogus", []string{"status", "--kind", "bogus", "k"}, nil, []string{`--kind "bogus": want lock, fairlock, rwlock, semaphore or latch`}},
		{"status a name with braces", []string{"status", "a{b}"}, nil, []string{`"a{b}" must not contain '{' or '}'`}},
		{"status --nodes redis://", []string{"status", "k", "--nodes", "redis://"}, nil, []string{"no host"}},
		{"release without --force", []string{"release", "k"}, nil, []string{"--force is required"}},
		{"release --force without a name", []string{"release", "--force"}, nil, []string{"no NAME given (redlock release --force NAME)"}},
		{"release --force a b", []string{"release", "--force", "a", "b"}, nil, []string{"one NAME expected, got 2"}},
		{"release --reason too long", []string{"release", "--force", "--reason", strings.Repeat("r", 300), "k"}, nil, []string{"reason of 300 bytes exceeds 256"}},
		{"demo --workers 0", []string{"demo", "--workers", "0"}, nil, []string{"--workers 0 out of range [1, 64]"}},
		{"torture --procs 0", []string{"torture", "--procs", "0"}, nil, []string{"--procs 0 out of range [1, 32]"}},
		{"torture --faults bogus", []string{"torture", "--faults", "pause,bogus"}, nil, []string{`--faults: unknown fault kind "bogus"`, "pause, kill, empty, delay, evict, clock"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.env != nil {
				e = tc.env
			}
			code, _, stderr := cli(t, e, tc.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, stderr)
			}
			oneLine(t, stderr)
			for _, w := range append([]string{"redlock " + tc.args[0] + ": invalid argument: "}, tc.words...) {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			for i, s := range srv {
				if left := keysLeft(t, s); len(left) > 0 {
					t.Errorf("node %d: keys left: %v", i, left)
				}
			}
		})
	}
}

// What a new user met in the CLI beside bad input: release --force takes
// --nodes after the name, as status does; run --label shows in status;
// status fails when fewer than a quorum of nodes could answer, e.g. every
// node answering WRONGTYPE for a user's key at the name.
func TestCLIFirstHour(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	nodes := strings.Join(testutil.Addrs(srv), ",")

	t.Run("release --force NAME --nodes", func(t *testing.T) {
		code, out, stderr := cli(t, []string{"REDLOCK_NODES="}, "release", "--force", "free-one", "--nodes", nodes)
		if code != 0 || !strings.Contains(out, "free-one was not held") {
			t.Fatalf("exit %d out %q stderr %q", code, out, stderr)
		}
		code, out, stderr = cli(t, []string{"REDLOCK_NODES="}, "status", "free-one", "--nodes", nodes)
		if code != 0 || !strings.Contains(out, "free") {
			t.Fatalf("status NAME --nodes: exit %d out %q stderr %q", code, out, stderr)
		}
	})

	t.Run("run --label", func(t *testing.T) {
		code, out, stderr := cli(t, []string{"REDLOCK_NODES=" + nodes}, "run", "--key", "labelled", "--label", "nightly-7", "--",
			binary, "status", "labelled", "--json")
		if code != 0 || !strings.Contains(out, `"label": "nightly-7"`) {
			t.Fatalf("exit %d out %q stderr %q", code, out, stderr)
		}
	})

	t.Run("status with WRONGTYPE on every node", func(t *testing.T) {
		for _, s := range srv {
			if _, err := s.Do("SET", "redlock:{userkey}:lock", "a user's value"); err != nil {
				t.Fatal(err)
			}
		}
		for _, args := range [][]string{{"status", "userkey"}, {"status", "userkey", "--json"}} {
			code, out, stderr := cli(t, []string{"REDLOCK_NODES=" + nodes}, args...)
			if code != 1 || !strings.Contains(stderr, "0 of 3 nodes answered, need 2") || !strings.Contains(stderr, "WRONGTYPE") ||
				!strings.Contains(stderr, "a key of another type or primitive is at that name") {
				t.Fatalf("%v: exit %d out %q stderr %q, want exit 1 naming the WRONGTYPE", args, code, out, stderr)
			}
			oneLine(t, stderr)
		}
		// one node of three: the quorum's view stands
		for _, s := range srv[1:] {
			if _, err := s.Do("DEL", "redlock:{userkey}:lock"); err != nil {
				t.Fatal(err)
			}
		}
		if code, out, stderr := cli(t, []string{"REDLOCK_NODES=" + nodes}, "status", "userkey"); code != 0 {
			t.Fatalf("WRONGTYPE on 1 of 3 nodes: exit %d out %q stderr %q", code, out, stderr)
		}
	})

	t.Run("status of a held lock with a node down", func(t *testing.T) {
		c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: testutil.Addrs(srv), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, _ := primitives.NewLock(c, "held")
		lease, err := l.TryAcquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		srv[2].Kill()
		if code, out, stderr := cli(t, []string{"REDLOCK_NODES=" + nodes}, "status", "held"); code != 0 || !strings.Contains(out, "held") {
			t.Fatalf("2 of 3 nodes up: exit %d out %q stderr %q", code, out, stderr)
		}
	})
}
