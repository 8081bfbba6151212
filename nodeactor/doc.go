// Package nodeactor runs one actor per Redis node: the sole owner of that
// node's rueidis client. Requests reach the node through two bounded
// mailboxes (an urgent lane for releases, rollbacks and renewals, and a normal
// lane for acquires); the actor groups them into batches and keeps several
// pipelined batches in flight at once. It also owns the node's push
// connection, its health (up/down, latency EWMA) and its capability probes.
//
// The package knows nothing of quorums, locks or waiters.
package nodeactor
