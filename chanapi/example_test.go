package chanapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/alicebob/miniredis/v2"
	"github.com/redlock-go/redlock/chanapi"
	"github.com/redlock-go/redlock/coordinator"
)

// Leader election: the worker that receives a lease leads until the lease's
// Lost channel closes (or it releases it), then campaigns again.
func ExampleLock() {
	var addrs []string
	for range 3 { // three in-process nodes; in production, Redis masters
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			fmt.Println(err)
			return
		}
		defer m.Close()
		addrs = append(addrs, m.Addr())
	}
	ctx := context.Background()
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: addrs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	a, err := chanapi.Lock(c, "leader")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	lease := <-a.Acquired()
	fmt.Println("leading with a valid lease:", lease.Valid())
	select {
	case <-lease.Lost():
		fmt.Println("lost the lead")
	default:
		// ... lead; step down:
		_ = lease.Release(ctx)
		fmt.Println("stepped down")
	}
	// Output:
	// leading with a valid lease: true
	// stepped down
}
