// Package adversarial_test holds the adversarial suites (every TestAdv*).
// They attack the protocol's logic, not a server's behaviour. Proxies hold
// or delay chosen messages; nodes pause, restart, resync and fail over.
// The tests check safety (no second holder while a lease is Valid) and
// what observers report. A host wall-clock step is discounted, not blamed
// on the lock (testutil.ValidPastStep). They wait out many TTLs, so they
// run on one Redis version only: scripts/test.sh leaves this package out
// of the server matrix. The helpers they share with primitives' tests are
// in internal/testkit.
package adversarial_test

import (
	"testing"

	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testutil.WatchStalls(m), testutil.LeakOptions()...)
}
