package coordinator_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/testutil"
)

// The tests here are not parallel: dead addresses (deadAddr) are ports
// just freed, which a server started by a parallel test could take.

// newWithin runs coordinator.New and fails the test if it takes longer than
// limit (far below cfg.StartTimeout: it must not wait that out).
func newWithin(t *testing.T, ctx context.Context, cfg coordinator.Config, limit time.Duration) error {
	t.Helper()
	cfg.Logger = quiet
	start := time.Now()
	c, err := coordinator.New(ctx, cfg)
	if err == nil {
		c.Close()
	}
	if d := time.Since(start); d > limit {
		t.Errorf("New took %s, want under %s (StartTimeout %s)", d.Round(time.Millisecond), limit, cfg.StartTimeout)
	}
	return err
}

// Refused credentials are not a node slow to start: New fails at once,
// saying which credentials to check, instead of retrying for StartTimeout.
// A minority of nodes refusing leaves New to the others.
func TestNewFailsAtOnceWhenCredentialsAreRefused(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{Password: "pw"})
	addrs := testutil.Addrs(srv)
	for _, tc := range []struct {
		name string
		cfg  coordinator.Config
		want string
	}{
		{"wrong password", coordinator.Config{Nodes: addrs, Password: "nope"}, "WRONGPASS"},
		{"no password", coordinator.Config{Nodes: addrs}, "NOAUTH"},
		{"wrong user in the URL", coordinator.Config{Nodes: []string{"redis://bob:pw@" + addrs[0], "redis://bob:pw@" + addrs[1], addrs[2]},
			Password: "pw"}, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.StartTimeout = 30 * time.Second
			err := newWithin(t, context.Background(), cfg, 10*time.Second)
			if !errors.Is(err, coordinator.ErrQuorumUnavailable) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "check Config.Username and Config.Password") {
				t.Fatalf("got %v, want ErrQuorumUnavailable saying %s and what to check", err, tc.want)
			}
		})
	}
	t.Run("one node of three", func(t *testing.T) {
		err := newWithin(t, context.Background(), coordinator.Config{Nodes: []string{"redis://:nope@" + addrs[0], addrs[1], addrs[2]},
			Password: "pw", StartTimeout: 30 * time.Second}, 10*time.Second)
		if err != nil {
			t.Fatalf("2 of 3 nodes accept the password: %v", err)
		}
	})
}

// A ctx that ends while New waits is in the error, so that errors.Is
// tells a cancelled start from unreachable nodes; a ctx already ended
// starts nothing.
func TestNewWrapsItsCtxError(t *testing.T) {
	dead := []string{deadAddr(t), deadAddr(t), deadAddr(t)}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	err := newWithin(t, ctx, coordinator.Config{Nodes: dead, StartTimeout: 30 * time.Second}, 10*time.Second)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, coordinator.ErrQuorumUnavailable) ||
		!strings.Contains(err.Error(), "before ctx ended") {
		t.Fatalf("cancelled while waiting: %v, want context.Canceled and ErrQuorumUnavailable", err)
	}
	err = newWithin(t, ctx, coordinator.Config{Nodes: dead}, time.Second)
	if !errors.Is(err, context.Canceled) || errors.Is(err, coordinator.ErrQuorumUnavailable) {
		t.Fatalf("cancelled before New: %v, want context.Canceled only", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	err = newWithin(t, dctx, coordinator.Config{Nodes: dead, StartTimeout: 30 * time.Second}, 10*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx deadline while waiting: %v, want context.DeadlineExceeded", err)
	}
}

// A TLS client against plain ports says so, as the plain client against
// TLS ports does (TestTLSMismatchFailsNew): the TLS handshake only times
// out there, so the node is asked a plain PING to tell a port that speaks
// plain RESP from a network fault.
func TestTLSClientAgainstPlainPortsSaysSo(t *testing.T) {
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	for _, tc := range []struct {
		name string
		cfg  coordinator.Config
	}{
		{"Config.TLS", coordinator.Config{Nodes: addrs, TLS: &tls.Config{MinVersion: tls.VersionTLS12}}},
		{"rediss:// URLs", coordinator.Config{Nodes: []string{"rediss://" + addrs[0], "rediss://" + addrs[1], "rediss://" + addrs[2]}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.StartTimeout = 2 * time.Second
			err := newWithin(t, context.Background(), cfg, 10*time.Second)
			if !errors.Is(err, coordinator.ErrQuorumUnavailable) || !strings.Contains(err.Error(), "answers plain RESP, not TLS") {
				t.Fatalf("got %v, want the plain-port hint", err)
			}
		})
	}
}

// fakePort listens on a free port and hands each connection to serve until
// the test ends; then it closes the listener and every connection, and
// waits for serve to return.
func fakePort(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			} else {
				conns = append(conns, c)
			}
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// answerOnce reads what the client sends first, writes reply and hangs up.
func answerOnce(reply string) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		var b [512]byte
		if _, err := c.Read(b[:]); err != nil {
			return
		}
		_, _ = c.Write([]byte(reply))
	}
}

// pgError is a PostgreSQL ErrorResponse ('E', length, fields), what a
// PostgreSQL server sends a client it cannot talk to.
func pgError() string {
	fields := "SFATAL\x00C08P01\x00Minvalid length of startup packet\x00\x00"
	n := len(fields) + 4
	return "E" + string([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) + fields
}

// New names the cause of each node it could not use: a node that will
// never serve this client (an unknown host, a DB index the server does not
// have, a port that speaks another protocol) fails New at once, as refused
// credentials do; a port that accepts and never answers is named after
// StartTimeout, with what was awaited and the setting that bounds it. No
// TLS hint unless a TLS handshake was seen, and never the password.
func TestNewNamesTheCause(t *testing.T) {
	testutil.RequireRedis(t)
	const pw = "s3cr3t-pw-of-the-test"
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{Password: pw}))
	silent := func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }
	hangUp := func(c net.Conn) { c.Close() }
	http := answerOnce("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n400 Bad Request")
	pg := answerOnce(pgError())
	two := func(serve func(net.Conn)) [2]string { return [2]string{fakePort(t, serve), fakePort(t, serve)} }
	for _, tc := range []struct {
		name  string
		bad   func() [2]string // two of the three nodes: no quorum is left
		fast  bool             // New fails well before StartTimeout
		words []string         // %s is the bad node's address
		isErr error            // errors.Is must hold too
	}{
		{"accepts and never answers", func() [2]string { return two(silent) }, false,
			[]string{"node %s: no answer to HELLO within StartTimeout 2s (the node accepted the connection but never answered)"},
			context.DeadlineExceeded},
		{"HTTP port", func() [2]string { return two(http) }, true,
			[]string{"node %s: ", "not a Redis server", `"HTTP/1.1 400 Bad Request`}, nil},
		{"PostgreSQL port", func() [2]string { return two(pg) }, true,
			[]string{"node %s: ", "not a Redis server", `"E\x00\x00\x00`}, nil},
		{"hangs up at once", func() [2]string { return two(hangUp) }, false,
			[]string{"node %s: ", "closed the connection without answering HELLO"}, nil},
		{"DB index out of range", func() [2]string {
			return [2]string{"redis://:" + pw + "@" + addrs[0] + "/99", "redis://:" + pw + "@" + addrs[1] + "/99"}
		}, true, []string{"node %s: DB index is out of range", "no database 99"}, nil},
		{"unknown host", func() [2]string { return [2]string{"nosuchhost.invalid:6379", "nosuchhost2.invalid:6379"} }, true,
			[]string{"node %s: ", "no such host"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.bad()
			cfg := coordinator.Config{Nodes: []string{bad[0], bad[1], addrs[2]}, Password: pw, StartTimeout: 2 * time.Second}
			limit := 10 * time.Second
			if tc.fast {
				cfg.StartTimeout, limit = 5*time.Second, 2*time.Second
			}
			err := newWithin(t, context.Background(), cfg, limit)
			if !errors.Is(err, coordinator.ErrQuorumUnavailable) {
				t.Fatalf("got %v, want ErrQuorumUnavailable", err)
			}
			if tc.isErr != nil && !errors.Is(err, tc.isErr) {
				t.Errorf("error %q does not wrap %v", err, tc.isErr)
			}
			msg := err.Error()
			for _, w := range tc.words {
				for _, b := range bad {
					b = strings.TrimPrefix(b, "redis://:"+pw+"@") // a node's address keeps its /db
					if want := strings.ReplaceAll(w, "%s", b); !strings.Contains(msg, want) {
						t.Errorf("error %q does not say %q", msg, want)
					}
				}
			}
			if strings.Contains(msg, "TLS") {
				t.Errorf("error %q hints at TLS, and no TLS handshake was seen", msg)
			}
			t.Logf("New: %v", err)
			if strings.Contains(msg, pw) {
				t.Errorf("error %q prints the password", msg)
			}
		})
	}
}
