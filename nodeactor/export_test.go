package nodeactor

// WatchSeq is the watch (docs/lock.md, "The watched connection").
func (a *Actor) WatchSeq() uint64 { return a.watch.Load() }

// IdentityOf is a node's identity as a look reads it from INFO server
// and replication.
func IdentityOf(info string) string { return identity(info) }

// SlotOwner is the master that the actor's slot map (the keeper's last
// read) gives slot to; "" while it has none.
func (a *Actor) SlotOwner(slot uint16) string {
	sm := a.slots.Load()
	if sm == nil || int(slot) >= len(sm.owner) {
		return ""
	}
	return sm.owner[slot]
}

// RefusesPing is refusesPing, for its table test.
var RefusesPing = refusesPing
