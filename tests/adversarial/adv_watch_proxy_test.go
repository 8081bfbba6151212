package adversarial_test

import (
	"net"
	"sync"
	"testing"
)

// freezeProxy is a TCP proxy in front of one node whose Freeze stops the
// server→client bytes of every connection open at that moment, each
// until its client sends something again: an idle connection (a push
// connection, a pooled or idle pipeline) gets what the node pushed only
// late, as a connection with a lost segment gets it after the
// retransmission timeout, while a connection that carries a request gets
// its bytes, in order, at once.
type freezeProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[*freezeConn]bool
	wg     sync.WaitGroup
}

type freezeConn struct {
	mu     sync.Mutex
	gate   chan struct{} // closed when open; nil when never frozen
	client net.Conn
	server net.Conn
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target, conns: map[*freezeConn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) Addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		fc := &freezeConn{client: c, server: s}
		p.mu.Lock()
		p.conns[fc] = true
		p.mu.Unlock()
		p.wg.Add(2)
		// client → server opens the gate first; server → client waits at it
		go pumpThrough(&p.wg, fc, c, s, fc.open)
		go pumpThrough(&p.wg, fc, s, c, fc.wait)
	}
}

func (fc *freezeConn) open() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.gate != nil {
		select {
		case <-fc.gate:
		default:
			close(fc.gate)
		}
	}
}

func (fc *freezeConn) wait() {
	fc.mu.Lock()
	g := fc.gate
	fc.mu.Unlock()
	if g != nil {
		<-g
	}
}

// Freeze stops the server→client bytes of every open connection until
// its client next sends. It returns how many connections it froze.
func (p *freezeProxy) Freeze() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for fc := range p.conns {
		fc.mu.Lock()
		fc.gate = make(chan struct{})
		fc.mu.Unlock()
	}
	return len(p.conns)
}

// Thaw opens every gate.
func (p *freezeProxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for fc := range p.conns {
		fc.open()
	}
}

func (p *freezeProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for fc := range p.conns {
		fc.open()
		fc.client.Close()
		fc.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// pumpThrough copies from → to, calling each before every chunk it
// writes; at the end it opens the gate and closes both ends.
func pumpThrough(wg *sync.WaitGroup, fc *freezeConn, from, to net.Conn, each func()) {
	defer wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			each()
			if _, werr := to.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	fc.open()
	from.Close()
	to.Close()
}
