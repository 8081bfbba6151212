package nodeactor

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"github.com/redis/rueidis"
)

// The watched connection (docs/lock.md, "The watched connection"). A
// single node's connection has CLIENT TRACKING on. The node then pushes an
// invalidation of all keys to it whenever it loses its dataset in place
// (FLUSHALL, a full resync, DEBUG RELOAD), before the reply of any later
// command. The watch counts those pushes, every connection that ends and
// every new dial. The armed prelude no longer reads INFO: the lane reads
// the identity once per watch value and trusts an armed reply only if the
// watch did not move.

// errWatchMoved is why an armed reply did not count: the watch moved
// during the call, or the identity read before it was not the one the
// call carried.
var errWatchMoved = errors.New("NOSCRIPT redlock node guard: the node lost its dataset, or its connection or identity changed, during the call (watched connection): its identity is read again")

// verdict is an INFO of the node, read on the connection of watch value
// seq, that named identity id.
type verdict struct {
	seq    uint64
	id     string
	master string // a Sentinel set's master the INFO went to ("" otherwise)
}

// wantsWatch reports whether the actor asks for a watched connection: the
// guard is on and the node is not a Redis Cluster (one client, many
// masters: their prelude keeps the INFO).
func (a *Actor) wantsWatch() bool { return a.opt.Guard != "" && !a.opt.Cluster }

// Watching reports whether the node's connection is watched. When it is
// not (tracking refused), the armed prelude reads INFO per call.
func (a *Actor) Watching() bool { return a.watching.Load() }

// watchOptions turns opt into a watched connection's: tracking on (OPTIN:
// no key is tracked, only flushes are pushed), every push and every ended
// connection bumps the watch, and so does every dial, before it.
//
// The options that would carry a call on another connection than the one
// whose reader sees the pushes are forced back (helper-9's review):
// DisableAutoPipelining sends calls on pooled connections whose replies
// rueidis reads without handling pushes; a BlockingPipeline below a batch
// moves the batch to a pooled connection; ClientTrackingOptions could
// REDIRECT the pushes to another client.
func (a *Actor) watchOptions(opt *rueidis.ClientOption) {
	opt.DisableCache = false
	opt.DisableAutoPipelining = false
	opt.ClientTrackingOptions = nil
	opt.BlockingPipeline = max(opt.BlockingPipeline, rueidis.DefaultBlockingPipeline, 2*a.opt.MaxBatch+2)
	user := opt.OnInvalidations
	opt.OnInvalidations = func(m []rueidis.RedisMessage) {
		a.watch.Add(1)
		if user != nil {
			user(m)
		}
	}
	dialCtx, dial := opt.DialCtxFn, opt.DialFn
	opt.DialFn = nil
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		a.watch.Add(1)
		switch {
		case dialCtx != nil:
			return dialCtx(ctx, dst, d, tc)
		case dial != nil:
			return dial(dst, d, tc)
		case tc != nil:
			return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", dst)
		}
		return d.DialContext(ctx, "tcp", dst)
	}
}

// batchWatch is what a batch with armed calls read of the watch before it
// was sent.
type batchWatch struct {
	seq    uint64
	id     string // the identity the armed calls carry
	master string // a Sentinel set's master the batch goes to
	verify bool   // no verdict held: the batch starts with INFO
}

// watchFor returns the batch's watch, nil when it has no armed call or the
// connection is not watched (the prelude checks then).
func (a *Actor) watchFor(cl rueidis.Client, us []unit) *batchWatch {
	if !a.watching.Load() || !a.guarded.Load() {
		return nil
	}
	for i := range us {
		if a.armed(us[i].call) {
			w := &batchWatch{seq: a.watch.Load(), id: a.armedIdentity(), master: a.masterOf(cl)}
			v := a.verdict.Load()
			w.verify = v == nil || *v != verdict{seq: w.seq, id: w.id, master: w.master}
			return w
		}
	}
	return nil
}

// infoCmd is the verifying INFO a batch starts with.
func infoCmd(cl rueidis.Client) rueidis.Completed {
	return cl.B().Info().Section("server", "replication").Build()
}

// trusted reports whether the batch's armed replies count: the watch did
// not move and the identity is the calls' (held by a verdict, or read by
// the batch's own INFO, which then becomes the verdict).
func (a *Actor) trusted(cl rueidis.Client, w *batchWatch, info rueidis.RedisResult) bool {
	if a.watch.Load() != w.seq || a.armedIdentity() != w.id || a.masterOf(cl) != w.master {
		return false
	}
	if !w.verify {
		return true
	}
	s, err := info.ToString()
	if err != nil || !masterOfIdentity(s, w.id) {
		return false
	}
	a.verdict.Store(&verdict{seq: w.seq, id: w.id, master: w.master})
	return true
}

// recheck settles a batch whose watch moved (trusted was false): one more
// INFO, after every reply. The identity then still the calls' means none
// of them ran on a node that lost its dataset since the verdict (a restart
// or a resync changes it for good; a FLUSHALL empties the arm key the
// prelude read). The watch moves for harmless reasons too (the push
// connection's dial, a reconnect): this spares those batches a refusal.
// The INFO becomes the verdict when the watch holds still across it.
func (a *Actor) recheck(ctx context.Context, cl rueidis.Client, w *batchWatch) bool {
	seq := a.watch.Load()
	s, err := cl.Do(ctx, infoCmd(cl)).ToString()
	if err != nil || !masterOfIdentity(s, w.id) || a.armedIdentity() != w.id || a.masterOf(cl) != w.master {
		return false
	}
	if a.watch.Load() == seq {
		a.verdict.Store(&verdict{seq: seq, id: w.id, master: w.master})
	}
	return true
}

// masterOf is the master a Sentinel set's client sends to ("" on a plain
// node). rueidis dials the new master of a switch (the watch moves) but
// closes the old connection later, so a verdict also names its master:
// one read on the old master never vouches for a batch on the new one.
func (a *Actor) masterOf(cl rueidis.Client) string {
	if !a.sentinel() {
		return ""
	}
	return sentinelMaster(cl)
}

// masterOfIdentity reports whether an INFO (server, replication) names
// identity id on a master. A replica takes its master's replication id,
// which may be the node's own old one: a node that fully resynced from its
// own lagging replica keeps its run_id and its replid, and lost keys
// (helper-11's review). A master's replid only ever changes to a new one.
func masterOfIdentity(info, id string) bool {
	return infoField(info, "run_id") != "" && infoField(info, "role") == "master" && identity(info) == id
}
