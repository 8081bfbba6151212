package nodeactor

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/redis/rueidis"
)

// transientCodes are the error codes (the first word of an error reply) of
// a node that is alive but cannot serve the request right now; the same
// request can succeed once it can:
//
//   - LOADING: the node is loading its dataset (after a restart).
//   - BUSY: a script or function is running past busy-reply-threshold.
//   - TRYAGAIN, MOVED, ASK: a Redis Cluster slot is being migrated or has
//     moved (rueidis follows MOVED/ASK itself; they reach us only when it
//     gave up).
//   - CLUSTERDOWN: the cluster lost a slot's master and has not failed over.
//   - MASTERDOWN: a replica lost its master (replica-serve-stale-data no).
//   - READONLY: the node was a master and is now a replica (a failover).
//   - NOREPLICAS: min-replicas-to-write is not met right now.
//   - UNBLOCKED: CLIENT UNBLOCK ended a blocked command.
//   - NOSCRIPT: the script cache was flushed between load and call.
//
// Anything else — ERR, WRONGTYPE, NOPERM, OOM, MISCONF, NOAUTH, CROSSSLOT,
// a script's own runtime error — is an answer about the request or the
// node's configuration: sending it again gets the same answer.
var transientCodes = map[string]bool{
	"LOADING":     true,
	"BUSY":        true,
	"TRYAGAIN":    true,
	"MOVED":       true,
	"ASK":         true,
	"CLUSTERDOWN": true,
	"MASTERDOWN":  true,
	"READONLY":    true,
	"NOREPLICAS":  true,
	"UNBLOCKED":   true,
	"NOSCRIPT":    true,
}

// transientErrs are the errors below the protocol that say the request
// did not get an answer — the connection broke or timed out, the request
// was not sent, or it was cut short by its context — not that the node
// refused it.
var transientErrs = []error{
	ErrNodeDown, ErrNotSent, ErrBusy, ErrNodeGuarded, errOutOfStep, errUnsure,
	rueidis.ErrClosing, rueidis.ErrDoCacheAborted, rueidis.ErrNoSlot,
	context.DeadlineExceeded, context.Canceled, os.ErrDeadlineExceeded,
	io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, net.ErrClosed,
	syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE,
	syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN,
}

// Transient reports whether err is known to be transient; err is the Err
// of a [Reply], or wraps it. Either the node did not answer: a connection
// error, EOF, a timeout, a request not sent, the client reconnecting. Or
// it answered "not now": one of the codes above, or "ERR max number of
// clients reached". Such a request may succeed when sent again.
//
// Everything else is not transient: an error reply that is an answer
// (ERR ..., WRONGTYPE, NOPERM and the ACL refusals of [IsNoPerm], OOM, a
// script's runtime error), a nil reply, [ErrClosed], an unknown error.
// The list is of what is known to be transient, so a new kind of error
// ends a call with its text instead of retrying it until a deadline.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		if re.IsNil() {
			return false
		}
		// rueidis strips the "ERR " of generic errors; accept both forms
		msg := strings.TrimPrefix(re.Error(), "ERR ")
		code, _, _ := strings.Cut(msg, " ")
		return transientCodes[code] || strings.HasPrefix(msg, "max number of clients reached")
	}
	for _, t := range transientErrs {
		if errors.Is(err, t) {
			return true
		}
	}
	var ne net.Error // dial, read and write errors, timeouts
	if errors.As(err, &ne) {
		return true
	}
	// rueidis's unexported errConnExpired: the connection was recycled
	// under the request.
	return strings.Contains(err.Error(), "connection is expired")
}

// IsNoPerm reports whether err is an ACL refusal from a node, whether the
// command was refused or a script called one its user may not run:
//
//   - NOPERM ... (a command, key or channel; every server)
//   - ERR The user executing the script can't run this command ... (Redis
//     7.0; "can't access at least one of the keys", "can't publish to the
//     channel" for keys and channels)
//   - ERR ACL failure in script: User u has no permissions to run the
//     'set' command ... (Redis 8, Valkey; "No permissions to access a
//     key", "... a channel")
//
// Retrying cannot help: the node will refuse until its ACL changes.
func IsNoPerm(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) || re.IsNil() {
		return false
	}
	msg := strings.TrimPrefix(re.Error(), "ERR ") // rueidis strips it
	return strings.HasPrefix(msg, "NOPERM") ||
		strings.HasPrefix(msg, "The user executing the script can't") ||
		strings.HasPrefix(msg, "ACL failure in script")
}

// IsAuthFailure reports whether err is a node's refusal of our
// credentials: WRONGPASS (a wrong user or password, or a disabled user) or
// NOAUTH (the node needs a password and none was given). Retrying cannot
// help until the credentials or the node's ACL change.
func IsAuthFailure(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) || re.IsNil() {
		return false
	}
	msg := strings.TrimPrefix(re.Error(), "ERR ")
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") ||
		strings.HasPrefix(msg, "invalid password") || strings.HasPrefix(msg, "invalid username-password pair")
}

// Unusable reports whether err, from connecting to a node, says the node
// will not serve this client as configured, however long it waits. That
// is our credentials refused ([IsAuthFailure]), a DB index the node does
// not have, an unknown host, or a peer that does not speak RESP. A node
// that closes the connection without a word is not counted: a proxy
// whose server is down does that too.
//
// An unknown host may be a name not yet published (a Kubernetes pod's
// before it is ready); New fails at once for it all the same, as a typo
// is the likelier cause.
func Unusable(err error) bool {
	return IsAuthFailure(err) || isDBIndexError(err) || isUnknownHost(err) || notRESP(err)
}

// isDBIndexError reports whether err is a node's refusal of SELECT db:
// "ERR DB index is out of range" (Redis, Valkey) or "ERR invalid DB index"
// (a DB that is not a number, or a server that says so).
func isDBIndexError(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) || re.IsNil() {
		return false
	}
	msg := strings.TrimPrefix(re.Error(), "ERR ")
	return strings.HasPrefix(msg, "DB index is out of range") || strings.HasPrefix(msg, "invalid DB index")
}

// isUnknownHost reports whether err is a resolver's "no such host".
func isUnknownHost(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// notRESP reports whether err is rueidis's reading of an answer that is
// not RESP: an HTTP or PostgreSQL server's, say.
func notRESP(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "received unknown message type") || strings.Contains(msg, "received unexpected")
}

// isDialError reports whether err happened while dialing (a dial timeout
// means no connection, not a node that accepted and was silent).
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
