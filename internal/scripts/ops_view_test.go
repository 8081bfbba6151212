package scripts

import (
	"reflect"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
)

// Each status reply reads as its view, leniently inside the array: a nil
// (a missing key's value) reads as "", a negative PTTL as no TTL. A reply
// that is not an array of the op's length is an error, not a view.
func TestStatusViewParsers(t *testing.T) {
	s, i, nilv := mock.RedisString, mock.RedisInt64, mock.RedisNil()
	arr := mock.RedisArray
	queue := arr(s("w1"), s("1700000000000"), s("w2"), s("1700000000500"))
	listed := []Listed{{"w1", 1700000000000}, {"w2", 1700000000500}}

	lock, err := ParseLockView(arr(s("rl1:L:tok"), i(1500), s("7"), i(2), queue, s("")))
	want := LockView{Value: "rl1:L:tok", TTL: 1500 * time.Millisecond, Fence: "7", Waiters: 2, Queue: listed}
	if err != nil || !reflect.DeepEqual(lock, want) {
		t.Errorf("lock status: %+v, %v; want %+v", lock, err, want)
	}
	free, err := ParseLockView(arr(nilv, i(-2), nilv, i(0)))
	if err != nil || !reflect.DeepEqual(free, LockView{}) {
		t.Errorf("free lock (observe, no queue): %+v, %v; want the zero view", free, err)
	}
	fair, err := ParseFairView(arr(s("rl1:FO:me"), i(900), s("3"), arr(s("a"), s("b"), s("c")), i(12), s("tok~l"), arr(s("a"), s("10"))))
	wantFair := LockView{Value: "rl1:FO:me", TTL: 900 * time.Millisecond, Fence: "3", Waiters: 3, Latest: "tok~l", Queue: []Listed{{"a", 10}}}
	if err != nil || !reflect.DeepEqual(fair, wantFair) {
		t.Errorf("fair status: %+v, %v; want %+v", fair, err, wantFair)
	}
	rw, err := ParseRWView(arr(s("rl1:W:wtok"), i(2), i(1), i(4), s("9"), arr(s("r1"), s(""), s("r2")), queue, arr(s("x"))))
	wantRW := RWView{Writer: "rl1:W:wtok", Readers: 2, WaitingWriters: 1, WaitingReaders: 4, Fence: "9",
		ReaderTokens: []string{"r1", "r2"}, WriterQueue: listed, ReaderWaiters: []string{"x"}}
	if err != nil || !reflect.DeepEqual(rw, wantRW) {
		t.Errorf("rwlock status: %+v, %v; want %+v", rw, err, wantRW)
	}
	sem, err := ParseSemView(arr(i(3), i(1), arr(i(0), i(2)), arr(s("rl1:S:a"), s("rl1:R:b")), queue))
	wantSem := SemView{Stored: 3, Waiters: 1, Slots: []int64{0, 2}, Values: []string{"rl1:S:a", "rl1:R:b"}, Queue: listed}
	if err != nil || !reflect.DeepEqual(sem, wantSem) {
		t.Errorf("semaphore status: %+v, %v; want %+v", sem, err, wantSem)
	}
	latch, err := ParseLatchView(arr(i(1), i(5), i(2), i(0), i(-1)))
	if want := (LatchView{Exists: true, Initial: 5, IDs: 2}); err != nil || latch != want {
		t.Errorf("latch status: %+v, %v; want %+v", latch, err, want)
	}

	short := arr(s("v"), i(1), s("1"))
	for name, parse := range map[string]func(rueidis.RedisMessage) error{
		"lock":      func(m rueidis.RedisMessage) error { _, err := ParseLockView(m); return err },
		"fairlock":  func(m rueidis.RedisMessage) error { _, err := ParseFairView(m); return err },
		"rwlock":    func(m rueidis.RedisMessage) error { _, err := ParseRWView(m); return err },
		"semaphore": func(m rueidis.RedisMessage) error { _, err := ParseSemView(m); return err },
		"latch":     func(m rueidis.RedisMessage) error { _, err := ParseLatchView(m); return err },
	} {
		for _, m := range []rueidis.RedisMessage{short, s("OK"), nilv} {
			if err := parse(m); err == nil || err.Error() != "redlock: unexpected status reply" {
				t.Errorf("%s status of %v: %v, want unexpected status reply", name, m, err)
			}
		}
	}
}
