package testutil

import (
	"strconv"
	"strings"
	"time"
)

// Resharding by hand, as an operator (or redis-cli --cluster reshard)
// does it: the cluster guard's tests move slots and abort migrations.

// NodeID returns s's cluster node id (CLUSTER MYID).
func (c *Cluster) NodeID(s *Server) string {
	c.t.Helper()
	id, err := s.Do("CLUSTER", "MYID")
	if err != nil {
		c.t.Fatalf("CLUSTER MYID on %s: %v", s.Addr(), err)
	}
	return id
}

// KeysInSlot returns the keys s holds in slot (CLUSTER GETKEYSINSLOT).
func (c *Cluster) KeysInSlot(s *Server, slot int) []string {
	c.t.Helper()
	v, err := s.Do("CLUSTER", "GETKEYSINSLOT", strconv.Itoa(slot), "100000")
	if err != nil {
		c.t.Fatalf("CLUSTER GETKEYSINSLOT %d on %s: %v", slot, s.Addr(), err)
	}
	return strings.Fields(strings.Trim(v, "[]"))
}

// Migrate moves keys (every key from holds in slot when none are given)
// from from to to with MIGRATE ... KEYS, as redis-cli --cluster reshard
// does. The slot should be MIGRATING on from and IMPORTING on to
// ([Cluster.OpenSlot]); a key missing on from is skipped.
func (c *Cluster) Migrate(slot int, from, to *Server, keys ...string) {
	c.t.Helper()
	if len(keys) == 0 {
		keys = c.KeysInSlot(from, slot)
	}
	if len(keys) == 0 {
		return
	}
	host, port, _ := splitAddr(to.Addr())
	args := append([]string{"MIGRATE", host, port, "", "0", "5000", "REPLACE", "KEYS"}, keys...)
	if v, err := from.Do(args...); err != nil || (v != "OK" && v != "NOKEY") {
		c.t.Fatalf("MIGRATE %v of slot %d from %s to %s: %s %v", keys, slot, from.Addr(), to.Addr(), v, err)
	}
}

// OpenSlot starts migrating slot from its owner from to to: IMPORTING on
// to, then MIGRATING on from.
func (c *Cluster) OpenSlot(slot int, from, to *Server) {
	c.t.Helper()
	s := strconv.Itoa(slot)
	c.setSlot(to, s, "IMPORTING", c.NodeID(from))
	c.setSlot(from, s, "MIGRATING", c.NodeID(to))
}

// AbortSlot ends a migration without moving the slot: CLUSTER SETSLOT
// STABLE on both sides. Keys already migrated stay on to, in a slot it
// does not serve.
func (c *Cluster) AbortSlot(slot int, from, to *Server) {
	c.t.Helper()
	s := strconv.Itoa(slot)
	c.setSlot(from, s, "STABLE")
	c.setSlot(to, s, "STABLE")
}

// MoveSlot moves slot from its owner to to with all its keys: OpenSlot,
// Migrate every key, then CLUSTER SETSLOT NODE on to, on the old owner
// and on every other master. It waits until every master that answers
// reports to as the slot's owner.
func (c *Cluster) MoveSlot(slot int, to *Server) {
	c.t.Helper()
	from := c.Owner(slot)
	if from == to {
		return
	}
	c.OpenSlot(slot, from, to)
	c.Migrate(slot, from, to)
	s, id := strconv.Itoa(slot), c.NodeID(to)
	c.setSlot(to, s, "NODE", id)
	c.setSlot(from, s, "NODE", id)
	for _, m := range c.Masters {
		if m != to && m != from && c.Role(m) == "master" {
			c.setSlot(m, s, "NODE", id)
		}
	}
	deadline := time.Now().Add(clusterTimeout)
	for c.Owner(slot) != to || !c.agree(slot, to) {
		if time.Now().After(deadline) {
			c.t.Fatalf("MoveSlot: slot %d not owned by %s everywhere within %v", slot, to.Addr(), clusterTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// GiveSlot gives slot to to without migrating its keys: CLUSTER
// BUMPEPOCH on to, then CLUSTER SETSLOT NODE there alone, so its claim
// wins by gossip. The old owner then deletes its keys in the slot (Redis drops a
// master's keys in a slot it lost), which GiveSlot waits for, as for
// every master that answers to name to as the owner.
func (c *Cluster) GiveSlot(slot int, to *Server) {
	c.t.Helper()
	from := c.Owner(slot)
	if from == to {
		return
	}
	// The epoch first: a claim made under a lower config epoch than the
	// old owner's is overturned by the old owner's next gossip message,
	// and a bump after that claims nothing (a stall between the two steps
	// lost the slot for good: TestGiveSlotSurvivesAStallBetweenItsSteps).
	if _, err := to.Do("CLUSTER", "BUMPEPOCH"); err != nil {
		c.t.Fatalf("CLUSTER BUMPEPOCH on %s: %v", to.Addr(), err)
	}
	time.Sleep(c.giveSlotGap)
	c.setSlot(to, strconv.Itoa(slot), "NODE", c.NodeID(to))
	deadline := time.Now().Add(clusterTimeout)
	for c.Owner(slot) != to || !c.agree(slot, to) || len(c.KeysInSlot(from, slot)) > 0 {
		if time.Now().After(deadline) {
			c.t.Fatalf("GiveSlot: slot %d not given to %s everywhere within %v", slot, to.Addr(), clusterTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Owner returns the master that says it owns slot (nil if none does).
func (c *Cluster) Owner(slot int) *Server {
	c.t.Helper()
	for _, s := range c.all {
		if c.Role(s) != "master" {
			continue
		}
		nodes, err := s.Do("CLUSTER", "NODES")
		if err != nil {
			continue
		}
		for line := range strings.Lines(nodes) {
			f := strings.Fields(line)
			if len(f) >= 8 && strings.Contains(f[2], "myself") && ownsSlot(f[8:], slot) {
				return s
			}
		}
	}
	return nil
}

// agree reports whether every master that answers names owner's address
// for slot.
func (c *Cluster) agree(slot int, owner *Server) bool {
	for _, s := range c.all {
		nodes, err := s.Do("CLUSTER", "NODES")
		if err != nil || c.Role(s) != "master" {
			continue
		}
		for line := range strings.Lines(nodes) {
			f := strings.Fields(line)
			if len(f) >= 8 && strings.Contains(f[2], "master") && ownsSlot(f[8:], slot) &&
				!strings.HasPrefix(f[1], owner.Addr()+"@") {
				return false
			}
		}
	}
	return true
}

// ownsSlot reports whether the slot ranges of a CLUSTER NODES line hold
// slot (entries in brackets are migrations, not ownership).
func ownsSlot(ranges []string, slot int) bool {
	for _, r := range ranges {
		if strings.HasPrefix(r, "[") {
			continue
		}
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		l, err1 := strconv.Atoi(lo)
		h, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && slot >= l && slot <= h {
			return true
		}
	}
	return false
}

func (c *Cluster) setSlot(s *Server, args ...string) {
	c.t.Helper()
	if _, err := s.Do(append([]string{"CLUSTER", "SETSLOT"}, args...)...); err != nil {
		c.t.Fatalf("CLUSTER SETSLOT %v on %s: %v", args, s.Addr(), err)
	}
}
