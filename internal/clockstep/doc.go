// Package clockstep holds tests only: what a step of a Redis server's wall
// clock does to the locks on it (one node forward or back, every node
// forward), on redis-servers whose clock testutil steps. See
// docs/reliability.md, "Clock steps".
package clockstep
