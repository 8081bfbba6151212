package chanapi

import (
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// Reader returns an Acquirer campaigning for read leases of the RWLock name.
func Reader(c *coordinator.Coordinator, name string, opts ...primitives.Option) (*Acquirer, error) {
	rw, err := primitives.NewRWLock(c, name, opts...)
	if err != nil {
		return nil, err
	}
	return Campaign(rw.Reader()), nil
}

// Writer returns an Acquirer campaigning for write leases of the RWLock name.
func Writer(c *coordinator.Coordinator, name string, opts ...primitives.Option) (*Acquirer, error) {
	rw, err := primitives.NewRWLock(c, name, opts...)
	if err != nil {
		return nil, err
	}
	return Campaign(rw.Writer()), nil
}
