package testkit

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/testutil"
)

// GrantSniffer records the direct-grant messages (g: unmarked, G: marked)
// published on one node (PSUBSCRIBE on a raw connection).
type GrantSniffer struct {
	mu   sync.Mutex
	msgs []string
	conn net.Conn

	srv    *testutil.Server
	syncCh string       // the sniffer's own channel, for Sync's markers
	sent   int          // markers published (test goroutine only)
	synced atomic.Int64 // the last marker received
}

// sniffers numbers the sniffers' own channels.
var sniffers atomic.Int64

// SniffGrants subscribes to the grant channels of name (a glob) on s.
func SniffGrants(t *testing.T, s *testutil.Server, name string) *GrantSniffer {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pat := "redlock:{" + name + "}:ch:*"
	own := "testkit:sniff:" + strconv.FormatInt(sniffers.Add(1), 10) // no glob characters
	fmt.Fprintf(c, "*3\r\n$10\r\nPSUBSCRIBE\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(pat), pat, len(own), own)
	g := &GrantSniffer{conn: c, srv: s, syncCh: own}
	ready := make(chan struct{})
	go func() {
		r := bufio.NewReader(c)
		once := sync.Once{}
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "psubscribe" {
				// both patterns are subscribed: one command did it
				once.Do(func() { close(ready) })
			}
			if n, ok := strings.CutPrefix(line, "sync:"); ok {
				if k, err := strconv.ParseInt(n, 10, 64); err == nil {
					g.synced.Store(k)
				}
			}
			if strings.HasPrefix(line, "g:") || strings.HasPrefix(line, "G:") {
				g.mu.Lock()
				g.msgs = append(g.msgs, line)
				g.mu.Unlock()
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("sniffer never subscribed")
	}
	t.Cleanup(func() { c.Close() })
	return g
}

// Got returns the messages recorded so far.
func (g *GrantSniffer) Got() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.msgs...)
}

// Sync waits until the sniffer has received every message the node
// published before Sync was called: it publishes a marker on the
// sniffer's own channel and waits for it. The node delivers a
// subscriber's messages in the order it published them, so none published
// earlier (by a script that ran before) can still be on its way. Test
// goroutine only.
func (g *GrantSniffer) Sync(t *testing.T) {
	t.Helper()
	g.sent++
	n := g.sent
	Admin(t, g.srv, "PUBLISH", g.syncCh, "sync:"+strconv.Itoa(n))
	testutil.WaitFor(t, 10*time.Second, "the grant sniffer's sync marker",
		func() bool { return g.synced.Load() >= int64(n) })
}
