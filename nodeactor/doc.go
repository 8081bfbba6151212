// Package nodeactor runs one actor per Redis node: the sole owner of that
// node's rueidis client. Requests are queued on lanes chosen by their
// resource (the hash tag of the first key), so one resource's requests run
// in order while other resources pipeline on the other lanes; each lane
// groups its queue into batches. Acquires (the Normal lane class) are
// bounded and refused with ErrBusy past the bound; releases, rollbacks and
// renewals (Urgent) are never refused for room while the node is up. The
// actor also owns the node's push connections, its health (up/down,
// latency EWMA) and its capability probes.
//
// The package knows nothing of quorums, locks or waiters.
//
// # Who owns what
//
// An Actor is a small pool, not one goroutine: Options.Workers lane
// goroutines (serve), one keeper goroutine (keeper), and one watcher
// goroutine per push connection. Callers (Send, TrySend, Do, Subscribe)
// run on their own goroutines. Every field of Actor has one rule:
//
//   - Each lane (a fifo) is one FIFO: callers append under its mutex, and
//     only that lane's goroutine takes from it and executes its batches, so
//     one resource's requests run in order. Lanes share no other state.
//   - client: written once, by the keeper, after the first successful
//     connect; read (Load) by the lanes. The keeper never replaces it
//     (rueidis reconnects underneath).
//   - caps, fatal: written only by the keeper (probe at connect,
//     configureMasters after a cluster's topology changed) — and caps once
//     in New, before any goroutine starts; read by the lanes (which script
//     form, native CAS), Status and Caps. A lane may use the previous caps
//     for a batch already being built: each value is a complete snapshot.
//   - The pusher (push connections, their active channels, retry times) is
//     the keeper's alone; a connection's watcher goroutine only forwards the
//     connection's failure to the keeper on a channel.
//   - subWant, subFresh: guarded by subMu; callers change them (Subscribe,
//     Unsubscribe), the keeper reads and clears them (reconcile), woken by
//     subDirty.
//   - up, lastErr: written by every goroutine that talks to the node (the
//     lanes after each batch, the keeper's ping and probes, the keeper's
//     subscriptions); each write is one atomic Swap or Store, and readers
//     (Status, Up, the engine's node count) get the latest observation.
//     Two observers may disagree for a moment (a lane's late reply marks
//     the node up just after a ping marked it down); the next batch or
//     ping settles it. No invariant spans two of these fields, and the
//     "node up"/"node down" log line is written once per transition
//     because Swap returns the previous value.
//   - ewmaNs: the latency EWMA, updated by the lanes and the keeper's ping
//     with a compare-and-swap loop, so concurrent samples are never lost;
//     read by Status.
//   - urgentN: an atomic counter of queued urgent requests, incremented by
//     callers and decremented by the lane that dequeues them.
//   - A Ticket's state is one atomic: the first of Deliver and Abandon to
//     move it from pending wins. Its drop flag is another: set by the
//     requester (Drop), read by the lane before it sends the request.
package nodeactor
