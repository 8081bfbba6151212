package primitives

import (
	"slices"
	"strconv"

	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// On a Redis Cluster node a script may only touch keys of one hash slot, and
// every name of a MultiLock has its own hash tag. There the set is taken one
// slot group at a time, in slot order. The order is fixed, so two
// overlapping sets cannot each hold a group the other waits for. The steps
// are a program run by the node's actor (nodeactor.Call.Next). A refused or
// failed group rolls back every group before it, and the node answers as
// one script would have. The fence is carried from group to group (ARGV
// floor), so the last group's answer is max+1 over all names' counters.
// Groups that chose less are then raised to it.

// forNode adapts call (one script over the whole set) to node i.
func (m *MultiLock) forNode(i int, call nodeactor.Call) nodeactor.Call {
	if len(m.groups) < 2 || !m.c.NodeIsCluster(i) {
		return call
	}
	n := len(m.names)
	args := call.Args[:len(call.Args)-n] // without the channels
	switch args[0] {
	case "acquire":
		return m.acquireSteps(args)
	case "renew":
		return m.allSteps(args, combineRenew)
	default: // release (rollback), fence
		return m.allSteps(args, combineRelease)
	}
}

// groupCall is the script call for group g with the op arguments args.
func (m *MultiLock) groupCall(g int, args []string) nodeactor.Call {
	idx := m.groups[g]
	keys := make([]string, 0, multiKeysPerName*len(idx))
	chans := make([]string, 0, len(idx))
	for _, i := range idx {
		keys = append(keys, m.keys[multiKeysPerName*i:multiKeysPerName*(i+1)]...)
		chans = append(chans, m.channels[i])
	}
	return nodeactor.Call{Script: multiScript, Keys: keys, Args: append(slices.Clone(args), chans...)}
}

// acquireSteps takes the groups in order. args ends with the floor.
func (m *MultiLock) acquireSteps(args []string) nodeactor.Call {
	fences := make([]int64, len(m.groups))
	// the rollback of this attempt (scripts.MultiAcquire: token, waiter)
	rb := m.rollbackOp(args[1], args[scripts.MultiWaiterArg]).Args()
	var step func(g int, floor int64) nodeactor.Call
	step = func(g int, floor int64) nodeactor.Call {
		a := slices.Clone(args)
		a[len(a)-1] = strconv.FormatInt(floor, 10) // MultiAcquire.Floor
		c := m.groupCall(g, a)
		c.Next = func(r nodeactor.Reply) (nodeactor.Call, nodeactor.Reply, bool) {
			x, err := parseGrant(r)
			if err != nil || !x.OK {
				// Undo the groups taken so far, and this one too when its
				// outcome is unknown; then answer this group's reply.
				upto := g
				if err != nil {
					upto = g + 1
				}
				// A rollback step that fails is answered instead of the
				// refusal: the caller then rolls back this node again.
				return m.seq(indexes(upto), func(int) []string { return rb }, r, failed)
			}
			fences[g] = x.Fence
			if g+1 < len(m.groups) {
				return step(g+1, max(floor, x.Fence)), nodeactor.Reply{}, false
			}
			// every group is ours; raise the counters of the groups that
			// chose a lower fence, then answer the last group's grant
			var low []int
			for j := range g {
				if fences[j] < x.Fence {
					low = append(low, j)
				}
			}
			// A failed raise answers its error; the caller treats the node
			// as failed and rolls it back (every group is ours).
			f := scripts.MultiFence{Fence: x.Fence, Keep: fenceKeep}.Args()
			return m.seq(low, func(int) []string { return f }, r, failed)
		}
		return c
	}
	return step(0, 0)
}

// seq runs op (arguments per group) on groups in order, then delivers
// final, or the first reply for which fail returns true.
func (m *MultiLock) seq(groups []int, op func(g int) []string, final nodeactor.Reply, fail func(nodeactor.Reply) bool) (nodeactor.Call, nodeactor.Reply, bool) {
	if len(groups) == 0 {
		return nodeactor.Call{}, final, true
	}
	var step func(k int) nodeactor.Call
	step = func(k int) nodeactor.Call {
		c := m.groupCall(groups[k], op(groups[k]))
		c.Next = func(r nodeactor.Reply) (nodeactor.Call, nodeactor.Reply, bool) {
			if fail != nil && fail(r) {
				return nodeactor.Call{}, r, true
			}
			if k+1 < len(groups) {
				return step(k + 1), nodeactor.Reply{}, false
			}
			return nodeactor.Call{}, final, true
		}
		return c
	}
	return step(0), nodeactor.Reply{}, false
}

// allSteps runs args on every group in order and answers the reply that
// combine picks as the node's answer.
func (m *MultiLock) allSteps(args []string, combine func(a, b nodeactor.Reply) nodeactor.Reply) nodeactor.Call {
	var acc *nodeactor.Reply
	var step func(g int) nodeactor.Call
	step = func(g int) nodeactor.Call {
		c := m.groupCall(g, args)
		c.Next = func(r nodeactor.Reply) (nodeactor.Call, nodeactor.Reply, bool) {
			if acc == nil {
				acc = &r
			} else {
				v := combine(*acc, r)
				acc = &v
			}
			if g+1 < len(m.groups) {
				return step(g + 1), nodeactor.Reply{}, false
			}
			return nodeactor.Call{}, *acc, true
		}
		return c
	}
	return step(0)
}

func failed(r nodeactor.Reply) bool { return r.Err != nil }

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// renewRank orders renew answers by what the node's answer must be: an
// error, then "not ours" (0), then "missing" (3), then "retaken" (2), then
// "renewed" (1).
func renewRank(r nodeactor.Reply) int {
	if r.Err != nil {
		return 0
	}
	switch v, err := r.Msg.AsInt64(); {
	case err != nil:
		return 0
	case v == scripts.RenewNotOurs:
		return 1
	case v == scripts.RenewMissing:
		return 2
	case v == scripts.RenewRetaken:
		return 3
	}
	return 4
}

func combineRenew(a, b nodeactor.Reply) nodeactor.Reply {
	if renewRank(b) < renewRank(a) {
		return b
	}
	return a
}

// combineRelease keeps the first error, else the answer that released the
// most keys (release and fence answer counts).
func combineRelease(a, b nodeactor.Reply) nodeactor.Reply {
	if a.Err != nil {
		return a
	}
	if b.Err != nil {
		return b
	}
	x, _ := a.Msg.AsInt64()
	y, _ := b.Msg.AsInt64()
	if y > x {
		return b
	}
	return a
}
