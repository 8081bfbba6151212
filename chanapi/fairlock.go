package chanapi

import (
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// FairLock returns an Acquirer campaigning for the FairLock called name:
// after each lease it ends, it queues again behind the waiters already
// queued (FIFO), so campaigners take turns.
func FairLock(c *coordinator.Coordinator, name string, opts ...primitives.Option) (*Acquirer, error) {
	l, err := primitives.NewFairLock(c, name, opts...)
	if err != nil {
		return nil, err
	}
	return Campaign(l), nil
}
