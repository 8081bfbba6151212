package nodeactor

import (
	"fmt"

	"github.com/redis/rueidis"
)

// unit is one command of a batch: one request's Call, or the joined call
// of several requests (Call.Join).
type unit struct {
	call  Call
	first int   // index in the batch of the (first) request
	elems []int // a joined call: the batch indexes of its elements, in order
}

// resources lists the resources a unit touches, for fallbacks.
func (u *unit) resources(live []Request) []string {
	if u.elems == nil {
		return []string{resource(u.call)}
	}
	out := make([]string, len(u.elems))
	for j, i := range u.elems {
		out[j] = resource(live[i].Call)
	}
	return out
}

// joinable reports whether a lane may run c as an element of a joined call.
// A program's step (Next) and a marking call (its marking copy) do not
// join, nor does anything on a Redis Cluster node: the keys of a joined
// call may lie in different slots.
func (a *Actor) joinable(c *Call) bool {
	return c.Join != nil && c.Join.Script != nil && c.Next == nil && !c.Mark && !a.opt.Cluster
}

// units turns a batch into its commands: requests whose Join names the same
// script become one call, at the place of the first of them. A request
// joins the open call only if no request of its own resource outside the
// call lies between, so one resource's requests still run in the order
// queued; otherwise it opens a new one. A call of one element is sent as
// its request's own Call. It appends to us (the lane's reused slice).
func (a *Actor) units(live []Request, us []unit) []unit {
	open := -1                  // index in us of the joined call being filled
	var touched map[string]bool // resources of other requests since it opened
	for i := range live {
		c := &live[i].Call
		if !a.joinable(c) {
			if open >= 0 {
				if touched == nil {
					touched = map[string]bool{}
				}
				touched[resource(*c)] = true
			}
			us = append(us, unit{call: *c, first: i})
			continue
		}
		if open >= 0 && us[open].call.Script == c.Join.Script && us[open].call.Armed == c.Armed && !touched[resource(*c)] {
			us[open].elems = append(us[open].elems, i)
			continue
		}
		open = len(us)
		clear(touched)
		// armed when its elements are: one guard check for the call
		us = append(us, unit{call: Call{Script: c.Join.Script, Armed: c.Armed}, first: i, elems: []int{i}})
	}
	for k := range us {
		u := &us[k]
		switch {
		case u.elems == nil:
		case len(u.elems) == 1:
			u.call, u.elems = live[u.first].Call, nil
		default:
			var keys, args []string
			for _, i := range u.elems {
				jn := live[i].Call.Join
				keys = append(keys, jn.Keys...)
				args = append(args, jn.Args...)
			}
			u.call.Keys, u.call.Args = keys, args
		}
	}
	return us
}

// split gives each element of a joined call its reply: its element of the
// answer, or, when the call as a whole failed, the call's failure.
func (a *Actor) split(n int, rep Reply) []Reply {
	out := make([]Reply, n)
	var arr []rueidis.RedisMessage
	if rep.Err == nil {
		var err error
		if arr, err = rep.Msg.ToArray(); err == nil && len(arr) != n {
			err = fmt.Errorf("a joined call of %d elements answered %d", n, len(arr))
		}
		if err != nil {
			rep.Err, arr = &NodeError{Addr: a.opt.Addr, Err: err}, nil
		}
	}
	for j := range out {
		if arr == nil {
			out[j] = rep
			continue
		}
		out[j] = Reply{Node: rep.Node, RTT: rep.RTT, Msg: arr[j]}
		if err := arr[j].Error(); err != nil {
			out[j] = Reply{Node: rep.Node, RTT: rep.RTT, Err: &NodeError{Addr: a.opt.Addr, Err: err}}
		}
	}
	return out
}
