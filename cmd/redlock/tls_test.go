package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/testutil"
)

// The CLI reaches TLS-only nodes given as rediss:// URLs with --tls-ca, or
// as host:port with REDLOCK_TLS_CA; without a CA it fails in one line that
// says TLS may be required; a bad CA file is a usage error.
func TestCLITLS(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{TLS: true})
	ca := srv[0].CAFile()
	var urls []string
	for _, a := range testutil.Addrs(srv) {
		urls = append(urls, "rediss://"+a)
	}
	noEnv := []string{"REDLOCK_NODES=", "REDLOCK_TLS_CA="}

	code, out, stderr := cli(t, noEnv, "run", "--key", "tls", "--nodes", strings.Join(urls, ","), "--tls-ca", ca,
		"--", "sh", "-c", `echo "fence=$REDLOCK_FENCE"`)
	if code != 0 || !strings.Contains(out, "fence=1") {
		t.Fatalf("run over rediss:// with --tls-ca: exit %d out %q stderr %q", code, out, stderr)
	}

	env := []string{"REDLOCK_NODES=" + strings.Join(testutil.Addrs(srv), ","), "REDLOCK_TLS_CA=" + ca}
	code, out, stderr = cli(t, env, "status", "tls")
	if code != 0 || !strings.Contains(out, "free") {
		t.Fatalf("status over host:port with REDLOCK_TLS_CA: exit %d out %q stderr %q", code, out, stderr)
	}

	code, _, stderr = cli(t, noEnv, "status", "--nodes", strings.Join(testutil.Addrs(srv), ","), "tls")
	if code != 1 || !strings.Contains(stderr, "require TLS") {
		t.Fatalf("status without TLS against TLS nodes: exit %d stderr %q", code, stderr)
	}
	oneLine(t, stderr)

	bad := filepath.Join(t.TempDir(), "not-a-ca.pem")
	if err := os.WriteFile(bad, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cli(t, noEnv, "status", "--nodes", strings.Join(urls, ","), "--tls-ca", bad, "tls")
	if code != 2 || !strings.Contains(stderr, "no PEM certificate") {
		t.Fatalf("status with a bad --tls-ca: exit %d stderr %q", code, stderr)
	}
	oneLine(t, stderr)
}
