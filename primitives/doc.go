// Package primitives holds the algorithms: one file per primitive, each with
// its Lua script (embedded), its per-node quorum rule, and the blocking API
// Acquire/TryAcquire. Every held primitive is a *Lease that renews itself,
// carries a fencing token and closes Lost() by its Deadline.
package primitives
