package scripts

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
)

// Each renewal and release answer reads as the outcome the engine counts:
// only a confirmation is OK; a vanished key is Missing or Retaken, never
// OK; another owner's value, a nil or WRONGTYPE is NotOwner.
func TestOutcomeParsers(t *testing.T) {
	wrongType := mock.Result(mock.RedisError("WRONGTYPE Operation against a key holding the wrong kind of value")).Error()
	otherErr := mock.Result(mock.RedisError("ERR something else")).Error()
	none := rueidis.RedisMessage{}
	type answer struct {
		name string
		m    rueidis.RedisMessage
		err  error
		want Outcome
	}
	for _, c := range []answer{
		{"renewed", mock.RedisInt64(RenewRenewed), nil, OutcomeOK},
		{"native SET IFEQ", mock.RedisString("OK"), nil, OutcomeOK},
		{"re-taken", mock.RedisInt64(RenewRetaken), nil, OutcomeRetaken},
		{"missing", mock.RedisInt64(RenewMissing), nil, OutcomeMissing},
		{"not ours", mock.RedisInt64(RenewNotOurs), nil, OutcomeNotOwner},
		{"an unknown code", mock.RedisInt64(9), nil, OutcomeNotOwner},
		{"nil (SET IFEQ refused)", mock.RedisNil(), nil, OutcomeNotOwner},
		{"WRONGTYPE", none, wrongType, OutcomeNotOwner},
		{"another error", none, otherErr, OutcomeError},
		{"a timeout", none, context.DeadlineExceeded, OutcomeError},
		{"a string", mock.RedisString("x"), nil, OutcomeError},
	} {
		if got := ParseRenewal(c.m, c.err); got != c.want {
			t.Errorf("renewal %s: %v, want %v", c.name, got, c.want)
		}
	}
	for _, c := range []answer{
		{"released", mock.RedisInt64(ReleaseReleased), nil, OutcomeOK},
		{"taken", mock.RedisInt64(ReleaseTaken), nil, OutcomeNotOwner},
		{"nothing of ours", mock.RedisInt64(ReleaseNotOurs), nil, OutcomeMissing},
		{"WRONGTYPE", none, wrongType, OutcomeError},
		{"a timeout", none, context.DeadlineExceeded, OutcomeError},
		{"a string", mock.RedisString("x"), nil, OutcomeError},
	} {
		if got := ParseLockRelease(c.m, c.err); got != c.want {
			t.Errorf("lock release %s: %v, want %v", c.name, got, c.want)
		}
	}
	if !IsWrongType(wrongType) || IsWrongType(otherErr) || IsWrongType(nil) {
		t.Error("IsWrongType: want true only for a WRONGTYPE reply")
	}
}
