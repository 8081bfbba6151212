// Package clockstep holds tests only. They check what a step of a Redis
// server's wall clock does to the locks on it: one node forward or back,
// every node forward. testutil steps the clock of real redis-servers. See
// docs/reliability.md, "Clock steps".
package clockstep
