package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/alicebob/miniredis/v2"
	"github.com/redlock-go/redlock/coordinator"
)

// New connects to the nodes — three independent masters here, embedded
// (miniredis) so that the example runs anywhere — and fails only if fewer
// than a quorum of them answer. Close releases every lease still held.
func ExampleNew() {
	var addrs []string
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			fmt.Println(err)
			return
		}
		defer m.Close()
		addrs = append(addrs, m.Addr())
	}
	c, err := coordinator.New(context.Background(), coordinator.Config{
		Nodes:  addrs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	up := 0
	for _, n := range c.Nodes() {
		if n.Up {
			up++
		}
	}
	fmt.Printf("%d nodes, quorum %d, %d up\n", c.N(), c.Quorum(), up)
	// Output: 3 nodes, quorum 2, 3 up
}

// Bad configuration is rejected before anything is sent, with an error
// that wraps ErrInvalidArgument.
func ExampleNew_invalid() {
	_, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{"10.0.0.1:6379"}, KeyPrefix: "app:{x}"})
	fmt.Println(errors.Is(err, coordinator.ErrInvalidArgument))
	// Output: true
}
