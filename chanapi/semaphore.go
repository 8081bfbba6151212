package chanapi

import (
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// Semaphore returns an Acquirer campaigning for one permit of the semaphore
// called name with permits permits: each lease it yields is one permit.
func Semaphore(c *coordinator.Coordinator, name string, permits int, opts ...primitives.Option) (*Acquirer, error) {
	s, err := primitives.NewSemaphore(c, name, permits, opts...)
	if err != nil {
		return nil, err
	}
	return Campaign(s), nil
}
