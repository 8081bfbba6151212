package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TryDo runs fn only when its one attempt wins, and releases in every case:
// after fn returns, after fn panics; a held lock leaves fn unrun.
func TestTryDo(t *testing.T) {
	t.Parallel()
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 3)))
	ctx := context.Background()
	l, _ := primitives.NewLock(c, "trydo")

	ran := false
	if err := primitives.TryDo(ctx, l, func(ctx context.Context) error {
		ran = true
		if !primitives.Heartbeat(ctx) {
			t.Error("fn's ctx carries no lease")
		}
		return errors.New("job failed")
	}); err == nil || err.Error() != "job failed" || !ran {
		t.Fatalf("TryDo on a free lock: ran %v, err %v; want fn's error", ran, err)
	}

	held, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("released after fn's error? TryAcquire: %v", err)
	}
	ran = false
	err = primitives.TryDo(ctx, l, func(context.Context) error { ran = true; return nil })
	var na *primitives.NotAcquiredError
	if ran || !errors.Is(err, primitives.ErrNotAcquired) || !errors.As(err, &na) || na.TTL <= 0 {
		t.Fatalf("TryDo on a held lock: ran %v, err %v; want a *NotAcquiredError with the TTL and fn unrun", ran, err)
	}
	_ = held.Release(ctx)

	err = primitives.TryDo(ctx, l, func(context.Context) error { panic("job crashed") })
	if err == nil || !strings.Contains(err.Error(), "TryDo: the function panicked") || !strings.Contains(err.Error(), "job crashed") {
		t.Fatalf("TryDo with a panicking fn: %v", err)
	}
	again, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("released after fn's panic? TryAcquire: %v", err)
	}
	_ = again.Release(ctx)

	for _, bad := range []struct {
		name string
		err  error
		want string
	}{
		{"nil Locker", primitives.TryDo(ctx, nil, func(context.Context) error { return nil }), "TryDo: nil Locker"},
		{"nil func", primitives.TryDo(ctx, l, nil), "TryDo: nil func"},
		{"nil ctx", primitives.TryDo(nil, l, func(context.Context) error { return nil }), "TryDo: nil ctx"},
	} {
		if !errors.Is(bad.err, primitives.ErrInvalidArgument) || !strings.Contains(bad.err.Error(), bad.want) {
			t.Errorf("%s: %v, want ErrInvalidArgument saying %q", bad.name, bad.err, bad.want)
		}
	}
}
