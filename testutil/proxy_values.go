package testutil

import (
	"bytes"
	"net"
	"strconv"
	"time"
)

// DropValues makes the proxy drop every RESP value the server sends that
// contains each of subs: say ("message", "+switch-master"), a Sentinel's
// pub/sub message about a failover, while the subscription's
// confirmation and every reply still flow. It applies to connections
// accepted after the first call (their server→client stream is cut into
// whole values); later calls add to what is dropped.
func (p *Proxy) DropValues(subs ...string) {
	var e [][]byte
	for _, s := range subs {
		e = append(e, []byte(s))
	}
	p.mu.Lock()
	p.dropVals = append(p.dropVals, e)
	p.mu.Unlock()
}

// Dropped returns how many values DropValues made the proxy drop.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// dropValue reports whether v is to be dropped, and counts it.
func (p *Proxy) dropValue(v []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.dropVals {
		all := true
		for _, sub := range e {
			all = all && bytes.Contains(v, sub)
		}
		if all {
			p.dropped++
			return true
		}
	}
	return false
}

// readValues is read for a server→client stream cut into whole RESP
// values, one chunk each, so that the writer can drop one (DropValues).
// Bytes that do not parse as RESP are passed on as they come.
func (c *proxyConn) readValues(src net.Conn, q chan<- chunk) {
	buf := make([]byte, proxyBufSize)
	var pending []byte
	raw := false // the stream did not parse: pass it on unframed
	send := func(data []byte, value bool) bool {
		c.p.mu.Lock()
		due := time.Now().Add(c.p.latency)
		c.p.mu.Unlock()
		select {
		case q <- chunk{data: data, due: due, value: value}:
			return true
		case <-c.closed:
			return false
		}
	}
	for {
		n, err := src.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			for len(pending) > 0 {
				if raw {
					if !send(pending, false) {
						return
					}
					pending = nil
					break
				}
				l, ok := respLen(pending)
				if l < 0 {
					raw = true
					continue
				}
				if !ok {
					break // an incomplete value: read more
				}
				v := append([]byte(nil), pending[:l]...)
				pending = pending[l:]
				if !send(v, true) {
					return
				}
			}
			if len(pending) == 0 {
				pending = nil
			}
		}
		if err != nil {
			if len(pending) > 0 && !send(pending, false) {
				return
			}
			select {
			case q <- chunk{eof: true}:
			case <-c.closed:
			}
			return
		}
	}
}

// respLen returns the length of the RESP2 or RESP3 value at the start of
// b, with ok false when b holds only part of it; -1 when b does not start
// with a RESP value.
func respLen(b []byte) (n int, ok bool) {
	if len(b) == 0 {
		return 0, false
	}
	eol := bytes.Index(b, []byte("\r\n"))
	if eol < 0 {
		return 0, false
	}
	head := string(b[1:eol])
	n = eol + 2
	count := func() (int, bool) {
		k, err := strconv.Atoi(head)
		return k, err == nil
	}
	switch b[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return n, true
	case '$', '!', '=':
		k, good := count()
		if !good {
			return -1, false
		}
		if k < 0 {
			return n, true
		}
		if len(b) < n+k+2 {
			return 0, false
		}
		return n + k + 2, true
	case '*', '>', '~', '%', '|':
		k, good := count()
		if !good {
			return -1, false
		}
		if b[0] == '%' || b[0] == '|' {
			k *= 2
		}
		if b[0] == '|' {
			k++ // the attribute map precedes the value it annotates
		}
		for range max(k, 0) {
			l, done := respLen(b[n:])
			if l < 0 || !done {
				return l, done
			}
			n += l
		}
		return n, true
	}
	return -1, false
}
