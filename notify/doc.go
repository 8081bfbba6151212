// Package notify is the one router actor for the push messages of every
// node. It keeps a FIFO list of waiters per topic (one topic per resource).
// It subscribes a topic only while it has waiters: reference counted, with
// a short linger so a busy resource does not churn SUBSCRIBE/UNSUBSCRIBE.
// It wakes exactly the waiters that can make progress. It never blocks on
// a slow waiter or on the connection that delivered a message.
//
// Users need not import it: package coordinator runs the router, and the
// primitives register their waiters with it.
//
// Payloads (published by the primitives' scripts on "<topic>:ch"):
//
//	h:<token>  wake the waiter holding that token (a handoff reserved for it)
//	n:<k>      wake the first k waiters (k permits or one lock freed)
//	a          wake every waiter (a latch opened, readers admitted)
//	ks:<event> a keyspace del/expired event on the topic's main key: wake the first waiter
//
// and, on one process's own channel of a topic ("<topic>:ch:<proc>",
// delivered with Router.DeliverFrom and the node it came from):
//
//	g:<seq>:<fence>:<now>:<token>  a direct grant to the waiter holding that
//	                               token: it reaches Waiter.Grants and wakes the waiter
//
// An unnamed wake-up (n:, ks:, a reconnect) may reach a waiter that cannot
// progress. That waiter calls Waiter.Pass, and the router hands the wake-up
// on to the next waiter of the topic, once per message. So one that can
// progress is reached.
//
// The package knows nothing of quorums or nodes beyond their push messages.
//
// It is the library's plumbing. A Coordinator starts and wires its own
// Router, and applications never call this package: to follow a lock, use
// primitives.Lock.Watch or chanapi.Observe, not Router.Observe. Its names
// are exported only because the library's engine lives in another package.
package notify
