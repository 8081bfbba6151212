package nodeactor

import (
	"errors"
	"time"
)

var (
	// ErrClosed means the actor has been closed.
	ErrClosed = errors.New("redlock: closed")
	// ErrNodeDown means the node has no working connection right now.
	ErrNodeDown = errors.New("redlock: node down")
	// ErrNotSent means a Normal request was dropped unsent because its
	// context ended while it was queued: it did nothing on the node. The
	// error also wraps the context's cause.
	ErrNotSent = errors.New("redlock: not sent: its context ended while it was queued")
	// ErrBusy means the request was refused for capacity: the node's
	// mailbox is full, or (from the engine) an acquire was not admitted
	// in time while renewals and releases went first.
	ErrBusy = errors.New("redlock: busy")
	// ErrNodeGuarded means the node guard holds the node out of the quorum:
	// it forgot its armed scripts (docs/lock.md, "Node guard").
	ErrNodeGuarded = errors.New("redlock: node guarded (it restarted, failed over or was flushed)")
	// ErrNotArmed means the node refused the node guard's look or arming
	// (OOM, MISCONF, NOPERM...): it is held out of the quorum for that
	// cause, which the error wraps, not because it forgot.
	ErrNotArmed = errors.New("redlock: node not armed: it refused the node guard")
)

// NodeError records the failure of one Redis node. Unwrap gives the cause.
type NodeError struct {
	Addr string
	Err  error
}

func (e *NodeError) Error() string { return "node " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *NodeError) Unwrap() error { return e.Err }

// ErrNotCluster means a node listed with cluster seeds is not a Redis Cluster.
var ErrNotCluster = errors.New("redlock: not a Redis Cluster")

// NoAnswerError means the node accepted the connection but did not answer
// the handshake within Waited. What names the handshake ("HELLO", or "the
// TLS handshake or HELLO"). Bound names the setting that bounds the wait,
// when it is not the dial timeout. Unwrap gives the deadline's error.
type NoAnswerError struct {
	What   string
	Waited time.Duration
	Bound  string
	Err    error
}

func (e *NoAnswerError) Error() string {
	within := e.Waited.String()
	if e.Bound != "" {
		within = e.Bound + " " + within
	}
	return "no answer to " + e.What + " within " + within + " (the node accepted the connection but never answered)"
}

// Unwrap returns the deadline's error.
func (e *NoAnswerError) Unwrap() error { return e.Err }
