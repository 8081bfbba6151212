// Package testutil starts real redis-server nodes and fault proxies for tests;
// it is imported by tests only.
//
// Three kinds of nodes are provided:
//
//   - [Server]: a real redis-server process on a free loopback port, which a
//     test can kill -9, pause (SIGSTOP), resume and restart with or without
//     its data. Admin commands go through [Server.Do], a tiny hand-written
//     RESP2 client, so this package needs no Redis client library.
//   - [Proxy]: an in-process TCP proxy in front of a node that injects
//     per-connection faults (blackhole, dropped requests or replies, resets)
//     and latency, with no privileges and deterministic behaviour.
//   - miniredis nodes ([StartMinis]) for fast in-process tests.
//
// Every process and goroutine started here is stopped by a t.Cleanup, so
// tests that use goleak stay clean.
package testutil
