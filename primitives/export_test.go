package primitives

import (
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
)

// SetFenceLifetime shortens the fence counters' lifetime (fenceKeep,
// fenceSkew) for a test and returns the function that restores it. Call it
// before any coordinator of the test exists.
func SetFenceLifetime(keep, skew time.Duration) (restore func()) {
	k, s := fenceKeep, fenceSkew
	fenceKeep, fenceSkew = keep, skew
	return func() { fenceKeep, fenceSkew = k, s }
}

// ProcOf returns the process id that c's direct grants are addressed to
// (the `<topic>:ch:<proc>` channel; its enqueuing attempts carry it).
func ProcOf(c *coordinator.Coordinator) string { return engine.Of(c).Proc() }
