// Package nodeactor runs one actor per Redis node. The actor is the sole
// owner of that node's rueidis client, its push connections, its health
// and its capability probes. It knows nothing of quorums, locks or waiters.
//
// Users need not import it: package coordinator runs the actors, and its
// errors and NodeStatus re-export what a caller reads.
//
// # Order: why one resource's requests run in order
//
// A resource is the hash tag of a request's first key; every key of a
// primitive shares it. The engine relies on one rule: a resource's requests
// run on the node in the order they were queued. A release never overtakes
// the acquire or rollback of the same resource sent before it. The rule
// holds across reconnects and resends, for these reasons.
//
//  1. One resource, one lane. A lane is served by one goroutine. Both
//     request classes (Normal, Urgent) of a resource share it. Its urgent
//     queue goes before its normal queue, but an urgent request whose
//     resource has a request in the normal queue joins that queue. So
//     within a resource, the lane is one FIFO.
//  2. One batch at a time. A lane sends its batch as one DoMulti and
//     waits until every reply came or failed. Only then does it take the
//     next batch. So a request is written only after every earlier request
//     of its resource was answered or definitely failed.
//  3. One connection. The client has one pipelined connection per node
//     (PipelineMultiplex -1), or per master on a cluster; a resource's
//     keys share a slot, so one master. rueidis writes a DoMulti's commands
//     in order on one connection, and Redis runs them in that order.
//  4. No retries by rueidis. DisableRetry is set, so rueidis never sends a
//     command twice on its own. A lane resends a broken batch's failed
//     commands once, in batch order, before it takes anything newer. Every
//     redlock script is safe to repeat, so a copy that ran twice is harmless.
//  5. No abandoned connections. rueidis closes an idle connection whose ctx
//     deadline passes, yet the server may still run what it read from it.
//     So the actor never gives rueidis a ctx deadline: a timer cancels the
//     ctx instead, which only stops waiting for the reply. A slow or paused
//     node keeps its connection, and what it runs keeps its order.
//  6. Fallbacks redo the tail. A script that finds NOSCRIPT, or a read-only
//     form the server refuses, is sent again after its batch. Its resource's
//     later requests of that batch already ran; they are sent again after
//     it, in order, and so, in turn, are the later requests of every
//     resource of a request sent again. So the node's final state is that
//     of the queued order.
//  7. Follow-ups go first. A program's next step and a cluster node's
//     delayed resend go at the head of the lane's next batch.
//  8. Joined calls only move requests earlier past other resources. The
//     requests of a batch that share a join script (Call.Join, or
//     Script.JoinedAs) and are all armed or all plain go as one call at
//     the place of the first; one joins only if no request of its own
//     resource that is not in the call lies between, and the call runs its
//     elements in order. A fallback or resend of the call redoes it whole,
//     and every later request of any of its resources (point 6), whether
//     the call itself found NOSCRIPT or is redone behind another request.
//
// A reconnect happens only between two batches of a lane, because of point
// 2. The one limit is a connection broken by the network while the node is
// paused: what the node read from it still runs when it resumes.
//
// # Replies: each reply is its own request's
//
// RESP has no request ids: rueidis gives a connection's replies to its
// requests in the order they were written. A reply lost on a live
// connection (a proxy that dropped it: FAULTS.md F7; TCP itself loses
// nothing without breaking the connection) leaves every later reply one
// request behind, for good. The next request would take its
// predecessor's reply: a grant meant for another resource among them.
// The lanes check the order in band, on a single node or a Sentinel set.
//
//  1. A marker ends every DoMulti of a lane (its batch, a resend, a
//     fallback): PING with a string no other request is answered with
//     (markPrefix and a number of this actor's, never reused).
//  2. Its replies count only if the marker's reply came and is its
//     string. A lost reply moves every later one up by one slot: the
//     marker's slot would hold the reply of a request written after it,
//     or nothing yet. Losses only add up, so a marker in place means
//     every reply before it on the connection is its own request's.
//  3. A marker answered with anything else says the connection is out
//     of step. The batch is answered as a broken connection's (the
//     outcome unknown: the engine counts no grant and rolls back), and
//     the actor closes the connection, so that rueidis dials a fresh one.
//     The marker's reply came, so the node ran every request of the lane
//     written before it: closing loses none and reorders none (point 5's
//     concern). The lane resends the batch once (point 4).
//  4. A marker whose reply did not come by the batch's deadline (a slow
//     or paused node, or a loss) leaves the batch's replies unknown too
//     (as a timeout's). The connection is kept, as point 5 wants, but
//     marked suspect: the next DoMulti also starts with a marker. Its
//     reply in place clears the mark (the replies were late, not lost);
//     anything else is point 3.
//  5. The keeper's health ping is a marker too, checked the same way:
//     a lane whose batches are shorter than the shift never sees a reply
//     in its own markers' slots (each times out, point 4), but the ping's
//     slot gets a later request's reply, and the ping replaces the
//     connection. Its slot fills only once as many requests as replies
//     were lost came after it, so the ping waits for it as long as the
//     actor lives (one at a time; the health verdict still comes after
//     DialTimeout). A lane trusts nothing meanwhile.
//  6. The guard's own requests (a look's INFO, an arming) carry no
//     marker. A shifted reply there fails their parsers' checks (a look
//     needs run_id; an arming reads its key's value back), and every armed
//     script checks the arm key on the node itself: a wrong belief there
//     refuses calls, never grants.
//  7. A node that refuses PING itself (an ACL without it, the command
//     renamed), or a proxy that answers PING with PONG whatever its
//     argument, gets no markers from then on, with a warning: its replies
//     are trusted in order, as any pipelined client's are. The batch whose
//     marker was refused is sent once more, without one.
//
// Limits. A cluster node sends no marker yet: its batches span masters,
// and a marker per master (Completed.SetSlot) is not built. The ping's
// replacement (point 5) may close a connection that still carries a lane
// batch the network holds (two faults at once: a lost reply and a stuck
// request); what the node reads of it later may run after requests sent
// on the new connection, the limit the Order section states for a
// connection broken during a pause.
//
// # Who owns what
//
// An Actor runs Options.Workers lane goroutines (serve) and one keeper.
// Callers (Send, TrySend, Do, Subscribe) run on their own goroutines.
//
//   - A lane's queues and its count per resource: callers append under
//     its mutex; only the lane takes.
//   - client, caps, fatal, the pusher: written by the keeper alone. The
//     lanes read the client and caps; each caps value is a full snapshot.
//     The keeper waits on the push connections' failures itself.
//   - subWant, subFresh: under subMu. Callers change them; the keeper
//     reconciles them, woken by subDirty.
//   - up, lastErr, ewmaNs: atomics written by whoever talked to the node
//     last (a lane after a batch, the keeper after a ping). The newest
//     observation wins; no invariant spans two of them.
//   - urgentN, normalN: queued urgent and normal requests, counted by
//     callers and lanes.
//   - slots (a cluster's slot map): written by the keeper alone, read
//     by the lanes (armed calls) and the guard's looks.
//   - armedAs, masterArms: written by the guard's Look, Arm and Adopt
//     (masterArms whole, under armMu); read by the lanes.
//   - suspects, pend, looked (the cluster guard): under armMu; a lane
//     adds the slot of a refused armed call to suspects.
//   - A Ticket's state: one atomic; the first of Deliver and Abandon wins.
//   - marks, unsure, noMarks, lateMark, dials: atomics of the markers
//     (lanes, the keeper and its one waiting health ping); conns: the
//     dialed connections, a sync.Map (the dial function adds, Close
//     removes, replaceConn closes).
package nodeactor
