// Package testutil gives redlock's tests, examples and benchmarks their
// nodes, faults and safety checkers; it is imported by tests only.
//
// Nodes:
//
//   - [Server]: a real redis-server process on a free loopback port, which a
//     test can kill -9, pause (SIGSTOP), resume and restart with or without
//     its data. Admin commands go through [Server.Do]: one rueidis
//     connection per command, rendered as redis-cli would show it.
//     [RequireRedis] skips a test without a redis-server (or fails it with
//     REDLOCK_REQUIRE_REDIS=1); [ServerEnv] selects the binary.
//   - [Cluster]: a real Redis Cluster of such servers, with replicas.
//   - [Proxy]: an in-process TCP proxy in front of a node that injects
//     per-connection faults (blackhole, dropped requests or replies, resets)
//     and latency, with no privileges and deterministic behaviour.
//   - miniredis nodes for fast in-process tests: [StartMinis] in a test,
//     [Embedded] where there is no testing.TB (runnable examples).
//
// The checkers test the properties of FAULTS.md. Each is safe for
// concurrent use, with a ready zero value:
//   - [CriticalSection] and [LeaseSection]: two holders at once.
//     LeaseSection also asks whether both leases were Valid, checks fences,
//     runs a lost-update probe, and Reports to a test.
//   - [Concurrency] and [ReadWrite]: how many holders, of which kind.
//   - [FencingStore]: stale or shared fencing tokens.
//   - [LostUpdate]: the read–pause–write probe.
//
// [Eventually] is the bounded wait for state that a request still in
// flight may change.
//
// Every process and goroutine started in a test is stopped by a t.Cleanup,
// so tests that use goleak stay clean ([LeakOptions] lists the goroutines
// of dependencies to ignore).
package testutil
