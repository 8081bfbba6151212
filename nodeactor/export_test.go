package nodeactor

// WatchSeq is the watch (docs/lock.md, "The watched connection").
func (a *Actor) WatchSeq() uint64 { return a.watch.Load() }

// IdentityOf is a node's identity as a look reads it from INFO server
// and replication.
func IdentityOf(info string) string { return identity(info) }
