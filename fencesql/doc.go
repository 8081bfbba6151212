// Package fencesql is the storage half of fencing: it makes a SQL database
// refuse the writes of a lock holder whose lease has been taken over.
//
// A lock alone cannot stop a holder that was paused past its lease (a GC
// pause, a stopped VM). It wakes up and writes, while a newer holder
// writes too. Each grant carries a fence ([primitives.Lease.Fence]) that grows
// from one holder to the next. The database keeps the highest fence it has
// seen per resource and refuses a transaction that brings a lower one.
//
// # Two ways to check a fence
//
// [Guard] records the fence in the table redlock_fences ([Schema]), inside
// the caller's transaction. If a higher fence is recorded there, it returns
// [ErrStale] and the caller rolls back. Call it in every transaction that
// writes on behalf of the lock, before its other writes. Call it when the
// work is claimed, and again in the commit: a newer holder's claim is what
// makes an older holder's later commit fail.
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	if err := fencesql.Guard(ctx, tx, fencesql.Postgres, "invoice-42", lease.Fence()); err != nil {
//		tx.Rollback() // errors.Is(err, fencesql.ErrStale): a newer holder took over
//		return err
//	}
//	// the transaction's writes, then tx.Commit()
//
// [Fenced] checks a single UPDATE of a row that carries its own fence
// column, written as `UPDATE … SET …, fence = $n WHERE … AND fence <= $n`.
// No row matched means the row has a higher fence.
//
// # Comparisons
//
// A fence equal to the recorded one passes. A lease and its reentrant holds
// ([primitives.WithOwner]) share one fence, and a holder guards several
// transactions with the same fence. Fences are stored as BIGINT. A fence
// above [math.MaxInt64] is an error that wraps [ErrInvalidArgument]; a
// lease's fences stay far below it.
//
// # Isolation levels
//
// Under READ COMMITTED (the default of PostgreSQL) the guard's statement
// waits for the row lock of a concurrent transaction on the same resource.
// It then compares against the row that transaction committed, so the
// later guard sees the newer fence. Under REPEATABLE READ and SERIALIZABLE
// the database refuses the statement instead, with a serialization failure
// or a deadlock. Guard returns that as an error that Is both ErrStale and
// the driver's error: this transaction must not commit. The fence that won
// may have been lower. So a holder whose lease is still valid may retry the
// whole transaction; the retry is refused again if the fence is stale.
//
// # Dialects
//
// [Postgres] and [SQLite] (3.35 or newer) record the fence with one
// INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING. [MySQL] (and
// MariaDB) has no RETURNING there. Guard raises the row to the greater
// fence with INSERT … ON DUPLICATE KEY UPDATE. It then reads it back with
// SELECT … FOR UPDATE, which reads the latest committed row. It never
// trusts MySQL's affected-rows count, which is 0 for an update that writes
// the value the row already has. [Fenced] has to trust it. On MySQL, open
// the connection with the CLIENT_FOUND_ROWS flag (go-sql-driver/mysql:
// clientFoundRows=true), so that a matched row counts even when the update
// changes nothing. Without the flag such an update reads as ErrStale.
//
// On SQLite, begin write transactions with BEGIN IMMEDIATE
// (modernc.org/sqlite: _txlock=immediate) and set a busy timeout. A
// deferred transaction that read before its guard fails with SQLITE_BUSY
// when another writer committed in between.
//
// The package uses database/sql only; bring your own driver.
package fencesql
