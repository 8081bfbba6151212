package nodeactor_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
)

func startMiniAt(t *testing.T, addr string) *miniredis.Miniredis {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}
