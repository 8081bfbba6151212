package primitives

import "time"

// SetFenceLifetime shortens the fence counters' lifetime (fenceKeep,
// fenceSkew) for a test and returns the function that restores it. Call it
// before any coordinator of the test exists.
func SetFenceLifetime(keep, skew time.Duration) (restore func()) {
	k, s := fenceKeep, fenceSkew
	fenceKeep, fenceSkew = keep, skew
	return func() { fenceKeep, fenceSkew = k, s }
}
