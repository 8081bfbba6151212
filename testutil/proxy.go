package testutil

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fault proxy is written here rather than taken from Toxiproxy. The Go
// packages of Toxiproxy pull in its whole HTTP API server. The few faults
// the Redlock tests need fit in a couple of hundred lines that run
// in-process, deterministically and without privileges.

// Fault is the behaviour of a [Proxy].
type Fault int

const (
	// Pass forwards bytes both ways.
	Pass Fault = iota
	// Blackhole accepts and holds connections but forwards nothing in
	// either direction. Bytes (and closes) that arrive meanwhile are held,
	// not dropped, and flow once the fault changes, as TCP retransmission
	// would deliver them after a partition heals.
	Blackhole
	// DropReplies forwards requests to the server and discards its replies.
	DropReplies
	// DropRequests discards the client's bytes, so nothing reaches the
	// server (and it has nothing to reply).
	DropRequests
	// Reset closes every current connection with a TCP RST and, until the
	// fault changes, resets every new connection right after accepting it.
	Reset
)

// String returns the name of the fault.
func (f Fault) String() string {
	switch f {
	case Pass:
		return "Pass"
	case Blackhole:
		return "Blackhole"
	case DropReplies:
		return "DropReplies"
	case DropRequests:
		return "DropRequests"
	case Reset:
		return "Reset"
	default:
		return "Fault(?)"
	}
}

const (
	// proxyBufSize is the largest chunk read at once.
	proxyBufSize = 32 << 10
	// proxyQueueLen is how many chunks a direction holds before its reader
	// stops reading (back-pressure).
	proxyQueueLen = 64
	// proxyDialTimeout bounds the dial to the target.
	proxyDialTimeout = 5 * time.Second
)

// Proxy is an in-process TCP proxy in front of one node, which injects a
// [Fault] and latency into the connections that pass through it. Each
// accepted connection gets its own connection to the target; bytes keep
// their order in each direction.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // canceled by Close; aborts dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loop and every connection goroutine

	mu      sync.Mutex
	fault   Fault
	latency time.Duration
	changed chan struct{} // closed and replaced on every SetFault/SetLatency
	conns   map[*proxyConn]struct{}
	closed  bool

	capturing bool
	captured  [][]byte // client→server chunks read while capturing

	holds []*Held // armed holds, in the order they were armed

	// dropVals: each entry lists substrings; a server→client RESP value
	// that contains every one of an entry's is dropped (DropValues).
	dropVals [][][]byte
	dropped  int // values dropped so far
}

// NewProxy starts a proxy that listens on 127.0.0.1:0 and forwards to
// target. It calls t.Fatal when it cannot listen, and registers a cleanup
// that closes the proxy and waits for its goroutines.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target:  target,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		changed: make(chan struct{}),
		conns:   make(map[*proxyConn]struct{}),
	}
	p.wg.Go(p.acceptLoop)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Capture turns recording of the client→server byte stream on or off:
// while on, every chunk read from a client is kept (in order) for
// Captured. Turning it on drops what was kept before.
func (p *Proxy) Capture(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && !p.capturing {
		p.captured = nil
	}
	p.capturing = on
}

// Captured returns copies of the chunks recorded while capturing that
// contain every one of the given substrings (all of them with none).
func (p *Proxy) Captured(contains ...string) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]byte
	for _, c := range p.captured {
		ok := true
		for _, sub := range contains {
			ok = ok && bytes.Contains(c, []byte(sub))
		}
		if ok {
			out = append(out, bytes.Clone(c))
		}
	}
	return out
}

// Replay sends data to the target on a fresh connection and returns the
// first reply line; an error reply is returned as an error. data is
// typically a chunk from Captured. It arrives as a late copy of a request
// would: a TCP retransmission, or a client's resend after a reconnect. The
// commands must not need the original connection's state: EVALSHA of a
// loaded script does not.
func (p *Proxy) Replay(data []byte) (string, error) {
	conn, err := net.DialTimeout("tcp", p.target, proxyDialTimeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(proxyDialTimeout))
	if _, err := conn.Write(data); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if msg, ok := strings.CutPrefix(line, "-"); ok {
		return "", errors.New("redis error reply: " + msg)
	}
	return line, nil
}

// Addr returns the address clients should dial, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetFault sets the fault. It applies at once to live connections,
// including bytes already read but not yet delivered, and to new ones.
func (p *Proxy) SetFault(f Fault) {
	p.mu.Lock()
	p.fault = f
	p.notifyLocked()
	var victims []*proxyConn
	if f == Reset {
		for c := range p.conns {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.close(true)
	}
}

// SetLatency sets a one-way delay added to every chunk in both directions,
// so a request-reply round trip takes at least 2*d longer. Chunks keep their
// order. Zero means no delay. The delay of a chunk is fixed when the proxy
// reads it.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = max(d, 0)
	p.notifyLocked()
	p.mu.Unlock()
}

// Close closes the listener and every connection, and waits until every
// goroutine of the proxy has returned. It is idempotent and always returns
// nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	for _, h := range p.holds {
		h.Release()
	}
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	for _, c := range conns {
		c.close(false)
	}
	p.wg.Wait()
	return nil
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns the current fault and the channel closed at the next change.
func (p *Proxy) state() (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault, p.changed
}

func (p *Proxy) acceptLoop() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // listener closed
		}
		p.wg.Go(func() { p.handle(client) })
	}
}

// handle dials the target for one accepted client connection and runs the
// connection's pumps. It returns once both directions are done.
func (p *Proxy) handle(client net.Conn) {
	if f, _ := p.state(); f == Reset {
		resetConn(client)
		return
	}
	d := net.Dialer{Timeout: proxyDialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		// The node is down: the client sees its connection closed.
		_ = client.Close()
		return
	}
	c := &proxyConn{p: p, client: client, server: server, closed: make(chan struct{})}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		c.close(false)
		return
	case p.fault == Reset:
		p.mu.Unlock()
		c.close(true)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	toServer := make(chan chunk, proxyQueueLen)
	toClient := make(chan chunk, proxyQueueLen)
	p.wg.Go(func() { c.read(client, toServer) })
	p.wg.Go(func() { c.write(server, toServer, DropRequests) })
	p.mu.Lock()
	framed := len(p.dropVals) > 0
	p.mu.Unlock()
	if framed {
		p.wg.Go(func() { c.readValues(server, toClient) })
	} else {
		p.wg.Go(func() { c.read(server, toClient) })
	}
	c.write(client, toClient, DropReplies)
}

// chunk is a piece of one direction's byte stream, due for delivery at due.
// A chunk with eof set marks the end of the stream (EOF or read error).
type chunk struct {
	data  []byte
	due   time.Time
	eof   bool
	value bool // data is one whole RESP value (framed connections)
}

// proxyConn is one client connection and its connection to the target.
// Each direction has a reader, which stamps chunks with their due time and
// queues them, and a writer, which delivers them in order once due and as
// the fault allows. So a delay never reorders bytes and never accumulates
// across chunks.
type proxyConn struct {
	p      *Proxy
	client net.Conn
	server net.Conn
	once   sync.Once
	closed chan struct{}
}

// close closes both sides once; with rst the client (and server) side is
// reset with SO_LINGER 0 instead of closed gracefully.
func (c *proxyConn) close(rst bool) {
	c.once.Do(func() {
		close(c.closed)
		if rst {
			resetConn(c.client)
			resetConn(c.server)
		} else {
			_ = c.client.Close()
			_ = c.server.Close()
		}
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// read reads src into the queue until src fails or the connection closes.
func (c *proxyConn) read(src net.Conn, q chan<- chunk) {
	buf := make([]byte, proxyBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c.p.mu.Lock()
			due := time.Now().Add(c.p.latency)
			if c.p.capturing && src == c.client {
				c.p.captured = append(c.p.captured, append([]byte(nil), buf[:n]...))
			}
			c.p.mu.Unlock()
			select {
			case q <- chunk{data: append([]byte(nil), buf[:n]...), due: due}:
			case <-c.closed:
				return
			}
		}
		if err != nil {
			select {
			case q <- chunk{eof: true}:
			case <-c.closed:
			}
			return
		}
	}
}

// write delivers queued chunks to dst in order, once each is due, unless
// the fault is drop (then the chunk is discarded) or Blackhole (then it
// waits for a change). The end of the stream closes the whole connection.
func (c *proxyConn) write(dst net.Conn, q <-chan chunk, drop Fault) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		var ch chunk
		select {
		case ch = <-q:
		case <-c.closed:
			return
		}
		if wait := time.Until(ch.due); !ch.eof && wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-c.closed:
				return
			}
		}
		if drop == DropRequests && !ch.eof {
			if h := c.p.match(ch.data); h != nil {
				select {
				case <-h.released:
				case <-c.closed:
					return
				}
			}
		}
		for {
			f, changed := c.p.state()
			if f != Blackhole {
				break
			}
			select {
			case <-changed:
			case <-c.closed:
				return
			}
		}
		if ch.eof {
			c.close(false)
			return
		}
		if f, _ := c.p.state(); f == drop {
			continue
		}
		if ch.value && c.p.dropValue(ch.data) {
			continue
		}
		if _, err := dst.Write(ch.data); err != nil {
			c.close(false)
			return
		}
	}
}

// resetConn closes conn with SO_LINGER 0, so the peer gets a RST.
func resetConn(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
