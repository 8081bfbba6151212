package nodeactor_test

import (
	"os"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// The environment of the server matrix (scripts/test.sh): on a server that
// has the command, its absence fails the test instead of testing the
// scripts only.
const (
	expectNativeCASEnv = "REDLOCK_EXPECT_NATIVE_CAS" // "1": SET ... IFEQ ... PX
	expectNativeCADEnv = "REDLOCK_EXPECT_NATIVE_CAD" // "delex" (Redis 8.4+) or "delifeq" (Valkey 9)
)

// Each native command is probed on its own and reported as the server
// itself answers it; the probes never create, change or delete a key — not
// even one that sits at the probe key — and ForceLua probes nothing.
func TestNativeProbesMatchTheServer(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	// what the server answers, asked directly on a scratch key
	has := func(args ...string) bool {
		_, err := s.Do(args...)
		return err == nil || !strings.Contains(err.Error(), "ERR")
	}
	want := nodeactor.Capabilities{
		NativeCAD:     has("DELEX", "scratch", "IFEQ", "v"),
		NativeDELIFEQ: has("DELIFEQ", "scratch", "v"),
		NativeCAS:     has("SET", "scratch", "w", "IFEQ", "v", "PX", "1000"),
	}
	if os.Getenv(expectNativeCASEnv) != "" && !want.NativeCAS {
		t.Fatalf("%s is set but the server refuses SET ... IFEQ ... PX", expectNativeCASEnv)
	}
	switch e := os.Getenv(expectNativeCADEnv); {
	case e == "delex" && !want.NativeCAD, e == "delifeq" && !want.NativeDELIFEQ:
		t.Fatalf("%s=%s but the server refuses it", expectNativeCADEnv, e)
	}
	t.Logf("server: DELEX IFEQ %v, DELIFEQ %v, SET IFEQ PX %v", want.NativeCAD, want.NativeDELIFEQ, want.NativeCAS)

	// a key at the probe key (the old probes compared it with "x": SET
	// gave it a TTL, DELEX deleted it)
	for _, key := range []string{nodeactor.DefaultProbeKey, "redlock:probe:custom"} {
		if _, err := s.Do("SET", key, "x"); err != nil {
			t.Fatal(err)
		}
	}
	a := start(t, s.Addr())
	ready(t, a)
	b := start(t, s.Addr(), func(o *nodeactor.Options) { o.ProbeKey = "redlock:probe:custom" })
	ready(t, b)
	for _, got := range []nodeactor.Capabilities{a.Caps(), b.Caps()} {
		if got.NativeCAD != want.NativeCAD || got.NativeDELIFEQ != want.NativeDELIFEQ || got.NativeCAS != want.NativeCAS {
			t.Errorf("probed DELEX %v DELIFEQ %v SET IFEQ %v, the server answers %v %v %v",
				got.NativeCAD, got.NativeDELIFEQ, got.NativeCAS, want.NativeCAD, want.NativeDELIFEQ, want.NativeCAS)
		}
	}
	forced := start(t, s.Addr(), func(o *nodeactor.Options) { o.ForceLua = true })
	ready(t, forced)
	if c := forced.Caps(); c.NativeCAD || c.NativeDELIFEQ || c.NativeCAS {
		t.Errorf("ForceLua must not use native commands: %+v", c)
	}
	for _, key := range []string{nodeactor.DefaultProbeKey, "redlock:probe:custom"} {
		if v, err := s.Do("GET", key); v != "x" || err != nil {
			t.Errorf("the probes changed %s: %q %v", key, v, err)
		}
		if ttl, err := s.Do("PTTL", key); ttl != "-1" || err != nil {
			t.Errorf("the probes gave %s a TTL: %s %v", key, ttl, err)
		}
	}
	if n, err := s.Do("DBSIZE"); n != "2" || err != nil {
		t.Errorf("the probes left keys behind: DBSIZE %s %v", n, err)
	}
}
