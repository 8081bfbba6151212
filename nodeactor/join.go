package nodeactor

import (
	"fmt"

	"github.com/redis/rueidis"
)

// unit is one command of a batch: one request's Call, or the joined call
// of several requests (Call.Join).
type unit struct {
	call  Call
	first int     // index in the batch of the (first) request
	elems []int   // a joined call: the batch indexes of its elements, in order
	join  *Script // the joined call's script, while the unit may take more
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
// A program's step (Next) does not join, nor a marking call whose element
// form cannot mark (not markable), nor anything on a Redis Cluster node:
// the keys of a joined call may lie in different slots.
func (a *Actor) joinable(c *Call) bool {
	j := c.joinScript()
	return j != nil && c.Next == nil && (!c.Mark || j.markable) && !a.opt.Cluster
}

// markIdentity is the identity a marking call carries: the one this actor
// last found the node armed under, on a guarded single node ("" else).
func (a *Actor) markIdentity() string {
	if !a.guarded.Load() || a.opt.Cluster {
		return ""
	}
	return a.armedIdentity()
}

// joinScript is the script of c's joined call: its Join's, or its
// script's element form (Script.JoinedAs); nil when it has none.
func (c *Call) joinScript() *Script {
	switch {
	case c.Join != nil:
		return c.Join.Script
	case c.Script != nil:
		return c.Script.many
	}
	return nil
}

// joinElem is c's element of a joined call: its Join's keys and
// arguments, or its own.
func (c *Call) joinElem() (keys, args []string) {
	if c.Join != nil {
		return c.Join.Keys, c.Join.Args
	}
	return c.Keys, c.Args
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
		if open >= 0 && us[open].join == c.joinScript() && us[open].call.Armed == c.Armed &&
			us[open].call.Mark == c.Mark && !touched[resource(*c)] {
			u := &us[open]
			if u.elems == nil {
				// a second element: the unit becomes a joined call, armed
				// when its elements are (one guard check for the call),
				// marking when they mark
				u.call, u.elems = Call{Script: u.join, Armed: c.Armed, Mark: c.Mark, joined: true}, []int{u.first}
			}
			u.elems = append(u.elems, i)
			continue
		}
		open = len(us)
		clear(touched)
		// its own call until another joins it
		us = append(us, unit{call: *c, first: i, join: c.joinScript()})
	}
	for k := range us {
		if u := &us[k]; u.elems != nil {
			a.joinElems(u, live)
		}
	}
	return us
}

// joinElems sets a joined call's keys and arguments: every element's, one
// after the other. A markable element form's elements each carry the arm
// key and the identity they mark with (markCheck reads them as the
// element's last key and argument), or, for a call that does not mark,
// their first key and "".
func (a *Actor) joinElems(u *unit, live []Request) {
	var keys, args []string
	if u.call.Mark {
		u.call.markID = a.markIdentity()
	}
	for _, i := range u.elems {
		k, v := live[i].Call.joinElem()
		keys = append(keys, k...)
		args = append(args, v...)
		if u.join.markable {
			// with no identity the key is never read: the element's own
			// first key stands in (an ACL allows it; a GuardOff node's arm
			// key name lies outside the KeyPrefix)
			ak := a.armKey()
			if u.call.markID == "" && len(k) > 0 {
				ak = k[0]
			}
			keys = append(keys, ak)
			args = append(args, u.call.markID)
		}
	}
	u.call.Keys, u.call.Args = keys, args
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
