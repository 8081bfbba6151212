// Package chanapi is the channel surface over package primitives: an
// Acquirer campaigns for a lock in its own goroutine and hands each lease
// over on an unbuffered channel, so callers can select on acquisition next
// to their other events (leader election, cron guards).
package chanapi
