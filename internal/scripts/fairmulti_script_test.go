package scripts

import (
	"maps"
	"testing"
	"time"
)

// An uncontended FairLock attempt (no ticket: TryAcquire) checks its eight
// keys with one MGET and one EXISTS, not eight TYPEs and four GETs (before:
// type:8 get:4 time zrange set incr pexpire).
func TestFairLockScriptUncontendedCommands(t *testing.T) {
	n := newScriptNode(t, FairLock, FairLockKeys)
	n.do("SET", n.keys[1], "100") // the fence counter (the coordinator writes the first)
	a := FairAcquire{Token: "tok", TTL: time.Minute, Waiter: "w", WaiterTimeout: time.Minute, TicketTTL: time.Minute,
		FenceKeep: time.Minute, Channel: "ch"}
	// fair_head's ZRANGE of the (missing) queue is the queue logic's own
	want := map[string]int{"mget": 1, "exists": 1, "time": 1, "zrange": 1, "set": 1, "incr": 1, "pexpire": 1}
	if got := n.commands(func() { n.mustRun(a) }); !maps.Equal(got, want) {
		t.Errorf("acquire ran %v, want %v", got, want)
	}
	if got := n.do("GET", n.keys[1]); got != "101" {
		t.Errorf("fence counter %s, want 101", got)
	}
}

// FairLock: a key of another type at any position, or a foreign value in
// one of its four string keys, is WRONGTYPE naming the first such key in
// the layout's order, for every op, and changes nothing.
func TestFairLockScriptWrongTypeChangesNothing(t *testing.T) {
	n := newScriptNode(t, FairLock, FairLockKeys)
	acq := FairAcquire{Token: "tok", TTL: time.Minute, Waiter: "w", WaiterTimeout: time.Minute, TicketTTL: time.Minute,
		FenceKeep: time.Minute, Channel: "ch"}
	queued := acq
	queued.Ticket = 5
	owner := acq
	owner.Owner = "o"
	ops := map[string]Op{
		"acquire": acq, "acquire ticket": queued, "acquire owner": owner,
		"release":  FairRelease{Token: "tok", Channel: "ch", Waiter: "w"},
		"rollback": FairRelease{Rollback: true, Token: "tok", Channel: "ch", Waiter: "w"},
		"leave":    FairLeave{Waiter: "w", Channel: "ch", WaiterTimeout: time.Minute},
		"claim":    FairClaim{Waiter: "w"},
		"ticket":   FairTicket{TicketTTL: time.Minute},
		"fence":    FairFence{Fence: 7, Keep: time.Minute},
		"renew":    FairRenew{Token: "tok", TTL: time.Minute, Retake: true},
		"status":   FairStatus{MaxWaiters: 3},
	}
	var cases []bad
	for i, k := range n.keys {
		cases = append(cases, bad{"list at " + FairLockKeys[i], [][]string{{"RPUSH", k, "x"}}, i})
	}
	held := []string{"SET", n.keys[0], "rl1:F:tok", "PX", "60000"}
	cases = append(cases,
		bad{"foreign lock value", [][]string{{"SET", n.keys[0], "hello"}}, 0},
		bad{"foreign fence", [][]string{{"SET", n.keys[1], "x1"}}, 1},
		bad{"foreign ticket", [][]string{{"SET", n.keys[4], "x1"}}, 4},
		bad{"foreign epoch", [][]string{{"SET", n.keys[6], "x1"}}, 6},
		bad{"lists at queue and gone", [][]string{{"RPUSH", n.keys[7], "x"}, {"RPUSH", n.keys[2], "x"}}, 2},
		bad{"held, list at ticket", [][]string{held, {"RPUSH", n.keys[4], "x"}}, 4},
		bad{"held, fence, ticket, string at holds", [][]string{held, {"SET", n.keys[1], "3"}, {"SET", n.keys[4], "3"}, {"SET", n.keys[5], "x"}}, 5},
		bad{"queued, list at epoch", [][]string{{"ZADD", n.keys[2], "1", "w"}, {"HSET", n.keys[3], "w", "99999999999999"}, {"RPUSH", n.keys[6], "x"}}, 6},
	)
	n.wrongType(t, cases, ops)
}

// multiNode is multilock.lua on two names, a and b.
func multiNode(t *testing.T) (*lockNode, func(op Op) Op) {
	layout := []string{"lock", "fence", "q", "qx", "w", "gone"}
	n := newScriptNode(t, MultiLock, nil)
	n.keys = append(Keys("redlock:{t}a", layout), Keys("redlock:{t}b", layout)...)
	withChannels := func(op Op) Op { return multiOp{op} }
	return n, withChannels
}

// multiOp appends the two names' channels to an op's Args.
type multiOp struct{ Op }

func (m multiOp) Args() []string { return append(m.Op.Args(), "ch-a", "ch-b") }

// An uncontended MultiLock attempt checks all its names' keys with one
// MGET and one EXISTS: no TYPE, no GET per name (before, on two names:
// type:12 get:4).
func TestMultiLockScriptUncontendedCommands(t *testing.T) {
	n, ch := multiNode(t)
	n.do("SET", n.keys[1], "100")
	n.do("SET", n.keys[7], "200")
	a := MultiAcquire{Token: "tok", TTL: time.Minute, FenceKeep: time.Minute, EntryTTL: time.Minute, FenceSkew: time.Second}
	got := n.commands(func() { n.mustRun(ch(a)) })
	if got["mget"] != 1 || got["exists"] != 1 || got["type"] != 0 || got["get"] != 0 {
		t.Errorf("acquire ran %v, want one MGET, one EXISTS, no TYPE or GET", got)
	}
	if a, b := n.do("GET", n.keys[1]), n.do("GET", n.keys[7]); a != "201" || b != "201" {
		t.Errorf("fence counters %s, %s, want 201 both", a, b)
	}
}

// MultiLock: a key of another type at any position of any name, or a
// foreign value at a lock or fence key, is WRONGTYPE naming the first such
// key (name by name, in the layout's order), for every op, and changes
// nothing.
func TestMultiLockScriptWrongTypeChangesNothing(t *testing.T) {
	n, ch := multiNode(t)
	ops := map[string]Op{
		"acquire":       ch(MultiAcquire{Token: "tok", TTL: time.Minute, FenceKeep: time.Minute, EntryTTL: time.Minute}),
		"acquire queue": ch(MultiAcquire{Token: "tok", TTL: time.Minute, FenceKeep: time.Minute, EntryTTL: time.Minute, Enqueue: true, Waiter: "w"}),
		"release":       ch(MultiRelease{Token: "tok", Window: time.Second, Release: true, Waiter: "w"}),
		"rollback":      ch(MultiRelease{Token: "tok", Window: time.Second, Waiter: "w"}),
		"leave":         ch(MultiLeave{Waiter: "w", Window: time.Second}),
		"renew":         ch(MultiRenew{Token: "tok", TTL: time.Minute, Retake: true}),
		"fence":         ch(MultiFence{Fence: 9, Keep: time.Minute}),
	}
	var cases []bad
	for i, k := range n.keys {
		cases = append(cases, bad{"list at " + k, [][]string{{"RPUSH", k, "x"}}, i})
	}
	cases = append(cases,
		bad{"foreign lock value at b", [][]string{{"SET", n.keys[6], "hello"}}, 6},
		bad{"foreign fence at a", [][]string{{"SET", n.keys[1], "1x"}}, 1},
		bad{"a held, list at a's queue", [][]string{{"SET", n.keys[0], "rl1:L:x", "PX", "60000"}, {"RPUSH", n.keys[2], "x"}}, 2},
		bad{"lists at b's lock and a's gone", [][]string{{"RPUSH", n.keys[6], "x"}, {"RPUSH", n.keys[5], "x"}}, 5},
		bad{"watch flag, list at b's fence", [][]string{{"SET", n.keys[4], "1"}, {"RPUSH", n.keys[7], "x"}}, 7},
	)
	n.wrongType(t, cases, ops)
}
