// Package chanapi is the channel surface over package primitives, for code
// that selects on acquisition next to its other events (leader election,
// cron guards, a standby replica).
//
// An [Acquirer] campaigns for a primitive in its own goroutine. It
// acquires, and hands the lease over on the unbuffered [Acquirer.Acquired]
// channel. It waits until that lease ends (released or lost), then
// campaigns again. [Lock], [FairLock], [MultiLock], [Reader], [Writer] and
// [Semaphore] build one for a primitive by name; [Campaign] for any
// primitives.Locker. The receiver of a lease owns it: it watches
// Lease.Lost and releases it. To stop campaigning, it calls
// [Acquirer.Close] before releasing its last lease. Close releases a lease
// acquired but not yet handed over. Retried errors are reported on
// [Acquirer.Errors], the fatal one by [Acquirer.Err].
//
// A [LatchWatcher] ([Latch]) turns CountDownLatch.Wait into a channel,
// Opened, that closes when the count reaches zero.
package chanapi
