package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/testutil"
)

// New connects to the nodes — three independent masters here, embedded
// (miniredis) so that the example runs anywhere — and fails only if fewer
// than a quorum of them answer. Close ends every lease still held.
func ExampleNew() {
	addrs, stop, err := testutil.Embedded(3) // in production: "10.0.0.1:6379", ...
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	c, err := coordinator.New(context.Background(), coordinator.Config{
		Nodes:  addrs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), // nil: slog.Default()
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

// New waits for a quorum of nodes, not for all of them: with one node of
// three down it starts, and the node view shows which one is missing.
// With two down it fails with an error that Is ErrQuorumUnavailable.
func ExampleCoordinator_Nodes() {
	addrs, stop, err := testutil.Embedded(2)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	down := "127.0.0.1:1" // nothing listens there
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: append(addrs, down), Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	for i, n := range c.Nodes() {
		fmt.Println("node", i, "up:", n.Up)
	}

	_, err = coordinator.New(context.Background(), coordinator.Config{Nodes: []string{addrs[0], down, "127.0.0.1:2"},
		StartTimeout: 300 * time.Millisecond, // how long New waits for a quorum; 0 means 5s
		Logger:       quiet,
	})
	fmt.Println("one of three:", errors.Is(err, coordinator.ErrQuorumUnavailable))
	// Output:
	// node 0 up: true
	// node 1 up: true
	// node 2 up: false
	// one of three: true
}
