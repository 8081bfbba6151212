package testutil

import (
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
