package benchkit

import (
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// ErrNoRedisServer is returned by StartRedisServers when redis-server is not
// found (PATH, or $REDLOCK_REDIS_SERVER).
var ErrNoRedisServer = errors.New("redis-server not found in PATH (or $" + redisproc.ServerEnv + "): install it (apt-get install redis-server), pass --nodes host:port,... or use --embedded (results not comparable)")

// Servers is a set of Redis nodes the benchmark runs against. Close stops the
// ones the benchmark started itself; nodes given with --nodes are never
// touched.
type Servers struct {
	Addrs []string
	procs []*redisproc.Process
	minis []*miniredis.Miniredis
}

// Close kills every redis-server this process started (SIGKILL, then reaps
// it, and removes its directory) and stops embedded servers. It is
// idempotent.
func (s *Servers) Close() {
	for _, p := range s.procs {
		p.Close()
	}
	s.procs = nil
	for _, m := range s.minis {
		m.Close()
	}
	s.minis = nil
}

// StartRedisServers starts n redis-server processes on free loopback ports
// (no RDB snapshots, no AOF) and waits until each answers PING. The binary
// is redis-server from PATH, or $REDLOCK_REDIS_SERVER.
func StartRedisServers(n int) (*Servers, error) {
	bin, ok := redisproc.Binary()
	if !ok {
		return nil, ErrNoRedisServer
	}
	s := &Servers{}
	for range n {
		p, err := redisproc.Start(redisproc.Config{Bin: bin})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("redis-server did not start: %w", err)
		}
		s.procs = append(s.procs, p)
		s.Addrs = append(s.Addrs, p.Addr())
	}
	return s, nil
}

// StartEmbedded starts n miniredis servers. Their results are not comparable
// with real servers (single-threaded Go Lua interpreter, no real I/O).
func StartEmbedded(n int) (*Servers, error) {
	s := &Servers{}
	for range n {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			s.Close()
			return nil, err
		}
		s.minis = append(s.minis, m)
		s.Addrs = append(s.Addrs, m.Addr())
	}
	return s, nil
}
