package scripts

import (
	"errors"
	"strings"

	"github.com/redis/rueidis"
)

// Outcome classifies one node's answer to a renewal or a release. Every
// primitive's renewal reads as ParseRenewal; a release script's reply
// has its own parser (ParseLockRelease for lock.lua).
type Outcome int

const (
	OutcomeOK       Outcome = iota // the node confirmed our token (renewed, re-taken or deleted)
	OutcomeNotOwner                // the node holds another owner's value: the hold is gone there
	OutcomeError                   // transport error, timeout or unexpected reply
	OutcomeRetaken                 // the key had vanished (a restarted node) and was re-taken: not a confirmation
	OutcomeMissing                 // the key is missing on the node (restarted empty): not a confirmation
)

// ParseRenewal reads a renewal reply (m, or the call's error err). Every
// primitive's renewal script answers alike: the shared prelude's
// NOT_OURS, RENEWED, RETAKEN and MISSING (Renew*). RENEWED, or "OK" from
// a native SET IFEQ, confirms. MISSING and RETAKEN count toward no
// quorum: a key that vanished from a majority is lost. NOT_OURS, nil or
// WRONGTYPE mean another owner.
func ParseRenewal(m rueidis.RedisMessage, err error) Outcome {
	if err != nil {
		if IsWrongType(err) {
			return OutcomeNotOwner
		}
		return OutcomeError
	}
	if m.IsNil() {
		return OutcomeNotOwner
	}
	// An integer first: ToString of one formats an error, which cost a
	// burst of 100,000 leases' renewals 4 % of the client's CPU.
	if !m.IsInt64() {
		if s, err := m.ToString(); err == nil && s == "OK" {
			return OutcomeOK
		}
	}
	if v, err := m.AsInt64(); err == nil {
		switch v {
		case RenewMissing:
			return OutcomeMissing
		case RenewRetaken:
			return OutcomeRetaken
		case RenewRenewed:
			return OutcomeOK
		}
		return OutcomeNotOwner
	}
	return OutcomeError
}

// ParseLockRelease reads lock.lua's release reply (m, or the call's error
// err): released, nothing of ours (missing), or another holder's key (not
// the owner).
func ParseLockRelease(m rueidis.RedisMessage, err error) Outcome {
	if err != nil {
		return OutcomeError
	}
	switch v, err := m.AsInt64(); {
	case err != nil:
		return OutcomeError
	case v == ReleaseReleased:
		return OutcomeOK
	case v == ReleaseTaken:
		return OutcomeNotOwner
	}
	return OutcomeMissing
}

// IsWrongType reports whether err is a WRONGTYPE reply from a node.
func IsWrongType(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}
