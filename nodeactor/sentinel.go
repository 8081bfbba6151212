package nodeactor

import (
	"context"
	"strconv"

	"github.com/redis/rueidis"
)

// sentinel reports whether the node is a Sentinel-managed master.
func (a *Actor) sentinel() bool { return a.opt.Client.Sentinel.MasterSet != "" }

// sentinelMaster returns the address of the master a Sentinel client
// sends commands to.
func sentinelMaster(cl rueidis.Client) string {
	for addr := range cl.Nodes() {
		return addr
	}
	return ""
}

// switched follows a Sentinel failover: rueidis already sends commands to
// the new master. The push connection still listens to the old one, and
// the new master has neither our keyspace flags nor, maybe, the same
// native commands. So the keeper probes and configures it again, then
// reopens the push connection. Messages sent meanwhile may be lost:
// waiters re-check (OnPushReset).
func (a *Actor) switched(p *pusher, cl rueidis.Client) {
	old := a.Caps().Master
	p.closeAll()
	clear(p.configured)
	caps, err := a.probe(cl, p)
	a.caps.Store(&caps)
	if err != nil {
		a.lastErr.Store(&err)
	}
	a.opt.Logger.Info("redlock: the Sentinel master changed", "node", a.opt.Addr, "from", old, "to", caps.Master)
	p.open()
	p.reconcile()
	if a.opt.OnPushReset != nil {
		a.opt.OnPushReset(a.opt.Index)
	}
}

// checkMinReplicas reads the master's min-replicas-to-write into caps and
// warns when it is 0. A master partitioned from its sentinels then keeps
// taking writes while they promote a replica: for a while one node of
// the quorum answers twice, on both sides. With min-replicas-to-write 1
// (and min-replicas-max-lag) the old master refuses writes once it lost
// its replicas, and its holders' renewals fail.
func (a *Actor) checkMinReplicas(ctx context.Context, cl rueidis.Client, caps *Capabilities) {
	caps.MinReplicasToWrite = -1
	v, err := configGet(ctx, cl, "min-replicas-to-write")
	if err != nil {
		return
	}
	caps.MinReplicasToWrite, _ = strconv.Atoi(v)
	if caps.MinReplicasToWrite == 0 {
		a.opt.Logger.Warn("redlock: a Sentinel master with min-replicas-to-write 0 may answer twice during a partition; set it to 1 or more",
			"node", a.opt.Addr, "master", caps.Master)
	}
}
