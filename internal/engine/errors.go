package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/argerr"
	"github.com/redlock-go/redlock/internal/guard"
)

// The errors the engine raises, defined here once. Packages coordinator and
// primitives each re-export them, the same values. ErrClosed and NodeError
// come from package nodeactor, ErrInvalidArgument from internal/argerr.
var (
	ErrNotAcquired       = errors.New("redlock: not acquired")
	ErrQuorumUnavailable = errors.New("redlock: quorum unavailable")
	ErrLeaseLost         = errors.New("redlock: lease lost")
	ErrReleased          = errors.New("redlock: released")
	ErrWrongType         = errors.New("redlock: wrong type at key")
	// ErrNoHeartbeat is the cause of a lease lost because its holder
	// stopped calling Heartbeat (HoldSpec.Heartbeat). Err wraps it inside
	// ErrLeaseLost.
	ErrNoHeartbeat = errors.New("redlock: no heartbeat")
)

// NotAcquiredError is returned when the resource is held by another owner.
// It Is ErrNotAcquired and carries the holder's remaining TTL as reported by
// the nodes that refused (the largest of them), 0 if unknown.
type NotAcquiredError struct {
	TTL time.Duration
}

func (e *NotAcquiredError) Error() string {
	if e.TTL > 0 {
		return fmt.Sprintf("%s: held by another owner for up to %s", ErrNotAcquired, e.TTL.Round(time.Millisecond))
	}
	return ErrNotAcquired.Error() + ": held by another owner"
}

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// Invalid returns an error wrapping ErrInvalidArgument.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{argerr.ErrInvalidArgument}, args...)...)
}

// TTL bounds and resource-name limits (re-exported by coordinator).
const (
	MinTTL     = 100 * time.Millisecond
	MaxTTL     = guard.MaxTTL
	MaxNameLen = 512
)

// ValidateTTL checks that ttl is within [MinTTL, MaxTTL].
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return Invalid("TTL %s out of range [%s, %s]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// ValidateName checks a resource name: non-empty, at most MaxNameLen
// bytes, without '{' or '}'.
func ValidateName(name string) error {
	switch {
	case name == "":
		return Invalid("empty resource name")
	case len(name) > MaxNameLen:
		return Invalid("resource name of %d bytes exceeds %d", len(name), MaxNameLen)
	case strings.ContainsAny(name, "{}"):
		return Invalid("resource name %q must not contain '{' or '}'", name)
	}
	return nil
}

// NilCtx is the error of a call given a nil ctx; op names the call.
func NilCtx(op string) error {
	return Invalid("%s: nil ctx (pass context.Background() or the request's ctx)", op)
}
