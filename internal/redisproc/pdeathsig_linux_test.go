//go:build linux

package redisproc_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/internal/redisproc"
	"github.com/redlock-go/redlock/testutil"
)

const helperEnv = "REDISPROC_TEST_HELPER"

// init runs as the helper of TestServerDiesWithItsParent when the
// environment names a directory: it starts a server there, prints its address and exits
// at once without any cleanup, as a test binary killed by a timeout would.
func init() {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		return
	}
	p, err := redisproc.Start(redisproc.Config{Dir: dir})
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("addr " + p.Addr() + "\n")
	os.Exit(0)
}

// On Linux a server dies with the process that started it, even one that
// exits without cleaning up (Pdeathsig).
func TestServerDiesWithItsParent(t *testing.T) {
	testutil.RequireRedis(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var addr string
	for line := range strings.Lines(string(out)) {
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "addr "); ok {
			addr = a
		}
	}
	if addr == "" {
		t.Fatalf("helper printed no address:\n%s", out)
	}
	if !testutil.Eventually(5*time.Second, func() bool { return !answersPing(addr) }) {
		shutdown(addr) // do not leave it running
		t.Fatalf("the server on %s still answers 5 s after its parent exited", addr)
	}
}

// answersPing reports whether a server on addr answers PING.
func answersPing(addr string) bool {
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true,
		ForceSingleClient: true, Dialer: net.Dialer{Timeout: time.Second}})
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := cl.Do(ctx, cl.B().Ping().Build()).ToString()
	return err == nil && v == "PONG"
}

// shutdown asks the server on addr to exit.
func shutdown(addr string) {
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_, _ = c.Write([]byte("*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n"))
		c.Close()
	}
}
