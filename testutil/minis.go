package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// StartMinis starts n in-process miniredis servers and closes them in
// t.Cleanup. It calls t.Fatal when one cannot start.
//
// miniredis has no CONFIG, CLIENT or DEBUG commands and no keyspace events;
// its TTLs move only through FastForward.
func StartMinis(t testing.TB, n int) []*miniredis.Miniredis {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	for i := range ms {
		ms[i] = miniredis.RunT(t)
	}
	return ms
}

// MiniAddrs returns the addresses of ms, in order.
func MiniAddrs(ms []*miniredis.Miniredis) []string {
	addrs := make([]string, len(ms))
	for i, m := range ms {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Embedded starts n in-process miniredis nodes outside a test — for
// runnable examples and demos — and returns their addresses and the
// function that stops them all. On an error nothing is left running.
//
// In production the addresses are those of independent Redis masters.
func Embedded(n int) (addrs []string, stop func(), err error) {
	ms := make([]*miniredis.Miniredis, 0, n)
	stop = func() {
		for _, m := range ms {
			m.Close()
		}
	}
	for range n {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			stop()
			return nil, nil, err
		}
		ms = append(ms, m)
		addrs = append(addrs, m.Addr())
	}
	return addrs, stop, nil
}

// KeyPrefix returns a Config.KeyPrefix unique to one test, for
// coordinator.Config{KeyPrefix: testutil.KeyPrefix(t.Name())}: "test:", the
// name (t.Name(), its characters other than letters, digits, '/', '-' and
// '_' replaced by '_', at most 64 bytes), 32 random bits in hex and ':'.
// Tests that share nodes then never see each other's keys, and the keys
// of a test that ended expire by their TTL.
func KeyPrefix(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	var r [4]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand doc)
	return "test:" + string(b) + ":" + hex.EncodeToString(r[:]) + ":"
}
