// Package primitives holds redlock's distributed primitives. Each is held
// on a quorum of the Coordinator's nodes, or on its one node.
//
//   - [Lock]: exclusive. A release hands it to the longest waiter. It is
//     reentrant only with [WithOwner].
//   - [FairLock]: exclusive, granted in enqueue order across processes.
//   - [MultiLock]: several Lock names at once or none. It cannot deadlock,
//     whatever the order callers list them in.
//   - [RWLock]: a phase-fair readers–writer lock, with [RWLock.Downgrade].
//   - [Semaphore]: at most n holders at once.
//   - [CountDownLatch]: opens once n distinct count-downs were made.
//
// # Using a primitive
//
// Create a [coordinator.Coordinator] once per process, then a primitive by
// name (New… validates its arguments and does no I/O; bad input is an error
// that wraps [ErrInvalidArgument]). Acquire blocks until the primitive is
// held or ctx ends; TryAcquire makes one attempt and fails with an error
// that Is [ErrNotAcquired] while another holder has it. An Acquire that
// ctx ended while another holder had it returns an error that Is both
// ctx.Err() and [ErrNotAcquired]. [Do] wraps Acquire, a function and
// Release; [TryDo] wraps TryAcquire, a function and Release.
//
// Every acquired primitive is a [*Lease]. A lease renews itself in the
// background (see [WithAutoRenew], [WithHeartbeat], [WithMaxHold]) until it
// is released or lost. If it is lost, its [Lease.Lost] channel closes and
// [Lease.Context] is cancelled by [Lease.Deadline], which always falls
// before the keys expire on the nodes: stop using the resource then. Its
// [Lease.Fence] strictly increases from one holder of the resource to the
// next: pass it to the storage the primitive protects, so that a holder
// that was paused past its deadline cannot overwrite a newer holder's work.
// Package fencesql does that check in a SQL database. Where the storage
// cannot check fences, [WithLockDelay] keeps a lost lease's name blocked
// a while longer. [WithMinHold] keeps a name held for a period from each
// grant: a job that several schedulers fire runs at most once per period.
// Release ends the lease on every node; it is safe to call after ctx ended
// and more than once.
//
// # Errors
//
// Errors are matched with errors.Is.
//   - [ErrNotAcquired]: held by someone else.
//   - [ErrQuorumUnavailable]: fewer than a quorum of nodes answered.
//   - [ErrLeaseLost]: the lease ended before the call.
//   - [ErrWrongType]: a key of the primitive holds a value of another type.
//   - [ErrInvalidArgument]: an argument or option was rejected.
//   - [ErrClosed]: the Coordinator was closed.
//
// [*NotAcquiredError] and [*NodeError] give the details per node.
//
// The design and the exact guarantees of each primitive are in the
// repository's docs/ (lock.md, fairlock.md, multilock.md, rwlock.md,
// semaphore.md, latch.md, fencing.md).
package primitives
