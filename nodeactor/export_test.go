package nodeactor

// WatchSeq is the watch (docs/lock.md, "The watched connection").
func (a *Actor) WatchSeq() uint64 { return a.watch.Load() }
