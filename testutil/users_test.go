package testutil_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Two tests run in parallel on the same nodes, each with a Coordinator
// whose KeyPrefix is KeyPrefix(t.Name()), lock the same name and do not
// see each other.
func TestKeyPrefixIsolatesTests(t *testing.T) {
	addrs := testutil.MiniAddrs(testutil.StartMinis(t, 3))
	ctx := context.Background()
	for range 2 {
		c, err := coordinator.New(ctx, coordinator.Config{
			Nodes: addrs, KeyPrefix: testutil.KeyPrefix(t.Name()),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := primitives.NewLock(c, "invoice-7")
		if err != nil {
			t.Fatal(err)
		}
		if _, err = l.TryAcquire(ctx); err != nil {
			t.Fatalf("TryAcquire: %v (the other test's lease is visible to this one)", err)
		}
	}
}

// KeyPrefix is unique per call, names the test, and is a valid
// KeyPrefix whatever the test's name holds.
func TestKeyPrefix(t *testing.T) {
	a, b := testutil.KeyPrefix("TestX/{odd} name"), testutil.KeyPrefix("TestX/{odd} name")
	if a == b {
		t.Errorf("two calls gave %q", a)
	}
	if !strings.HasPrefix(a, "test:TestX/_odd__name:") || strings.ContainsAny(a, "{} ") || !strings.HasSuffix(a, ":") {
		t.Errorf("KeyPrefix = %q", a)
	}
	if long := testutil.KeyPrefix(strings.Repeat("x", 500)); len(long) > 100 {
		t.Errorf("KeyPrefix of a long name is %d bytes", len(long))
	}
}
