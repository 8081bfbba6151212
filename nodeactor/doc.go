// Package nodeactor runs one actor per Redis node. The actor is the sole
// owner of that node's rueidis client, its push connections, its health
// and its capability probes. It knows nothing of quorums, locks or waiters.
//
// # Order: why one resource's requests run in order
//
// A resource is the hash tag of a request's first key; every key of a
// primitive shares it. The engine relies on one rule: a resource's requests
// run on the node in the order they were queued. A release never overtakes
// the acquire or rollback of the same resource sent before it. The rule
// holds across reconnects and resends, for these reasons.
//
//  1. One mailbox, one owner. Callers queue in the actor's mailbox; only
//     the actor goroutine (run) takes from it, in queue order. Both
//     request classes (Normal, Urgent) of a resource share it.
//  2. One batch per resource on the wire. A batch goes as one DoMulti.
//     The actor takes no request of a resource while a batch holding one
//     is out, until every reply came or definitely failed. So a request is
//     written only after every earlier request of its resource finished.
//  3. One connection. The client has one pipelined connection per node
//     (PipelineMultiplex -1), or per master on a cluster. A resource's keys
//     share a slot, so one master. rueidis writes a DoMulti's commands in
//     order on one connection, and Redis runs them in that order.
//  4. No retries by rueidis. DisableRetry is set, so rueidis never sends a
//     command twice on its own. A batch resends its broken commands once,
//     in batch order, before it is done. Every redlock script is safe to
//     repeat, so a copy that ran twice is harmless.
//  5. No abandoned connections. rueidis closes an idle connection whose ctx
//     deadline passes, yet the server may still run what it read from it.
//     So the actor never gives rueidis a ctx deadline: a timer cancels the
//     ctx instead, which only stops waiting for the reply. A slow or paused
//     node keeps its connection, and what it runs keeps its order.
//  6. Fallbacks redo the tail. A script that finds NOSCRIPT, or a read-only
//     form the server refuses, is sent again after its batch. Its resource's
//     later requests of that batch already ran; they are sent again after
//     it, in order. So the node's final state is that of the queued order.
//  7. Follow-ups go first. A program's next step and a cluster node's
//     delayed resend keep their resource busy. They go at the head of a
//     later batch, before anything newer of their resource.
//
// rueidis reconnects only when a command is sent after the connection
// broke. By point 2, a resource's next request is then sent only after
// the broken batch finished. The one limit is a connection broken by the
// network while the node is paused: what the node read from it still runs
// when it resumes.
//
// # Who owns what
//
// One goroutine, run, owns the node's state: the client, the push
// connections, which resources are busy, the follow-ups. It does the I/O
// of a batch itself when Options.Workers is 1 (the default). Otherwise,
// and for jobs (connect and probe, the health tick, subscriptions), it
// starts a short-lived worker. A worker touches only what run handed it,
// and hands its outcome back on run's events channel.
//
//   - The mailbox: callers append under its mutex; only run takes.
//   - The pusher belongs to the job running, if any, else to run.
//   - up, ewmaNs, lastErr, caps, fatal, client: written by run alone. They
//     are atomics only so that Status, Up and Caps can read them.
//   - subWant, subFresh: under subMu. Callers change them and set
//     subDirty; a job reconciles them.
//   - urgentN: queued urgent requests, counted by callers and run.
//   - A Ticket's state: one atomic; the first of Deliver and Abandon wins.
package nodeactor
