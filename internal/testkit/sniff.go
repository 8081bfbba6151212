package testkit

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
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
}

// SniffGrants subscribes to the grant channels of name (a glob) on s.
func SniffGrants(t *testing.T, s *testutil.Server, name string) *GrantSniffer {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pat := "redlock:{" + name + "}:ch:*"
	fmt.Fprintf(c, "*2\r\n$10\r\nPSUBSCRIBE\r\n$%d\r\n%s\r\n", len(pat), pat)
	g := &GrantSniffer{conn: c}
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
				once.Do(func() { close(ready) })
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
