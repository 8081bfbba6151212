package nodeactor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// Capabilities are what the probes found on a node.
type Capabilities struct {
	RESP3           bool   // the command connection speaks RESP3
	NativeCAD       bool   // DELEX key IFEQ value works (Redis 8.4+)
	NativeDELIFEQ   bool   // DELIFEQ key value works (Valkey 9+)
	NativeCAS       bool   // SET key value IFEQ value PX ms works (Valkey 8.1+, Redis 8.4+)
	Keyspace        bool   // keyspace del/expired events are enabled ("Kgx" or wider)
	KeyspaceFlags   string // notify-keyspace-events as last read ("" if CONFIG is refused)
	ConfigRefused   bool   // CONFIG GET/SET was refused (ACL, managed service, miniredis)
	MaxmemoryPolicy string // "" if unknown
	DedicatedPush   bool   // push messages use their own connection
	Cluster         bool   // the node is a Redis Cluster: sharded pub/sub, one push connection per master
	Masters         int    // masters owning slots (1 on a single node)
	// Sentinel is set for a Sentinel-managed master. Master is the
	// address the sentinels named last. MinReplicasToWrite is that
	// master's min-replicas-to-write (-1 if CONFIG is refused).
	Sentinel           bool
	Master             string
	MinReplicasToWrite int
	Probed             bool
}

// ErrKeyspaceUnavailable means KeyspaceOn was asked for and the node refused
// to enable keyspace events.
var ErrKeyspaceUnavailable = errors.New("redlock: keyspace events required but cannot be enabled")

// connect makes the node's client: a watched connection where the guard
// may apply (guard.go), else, or where the node refuses tracking (an
// ACL, RESP2), a plain one.
func (a *Actor) connect() (rueidis.Client, error) {
	if a.wantsWatch() {
		cl, err := a.connectWith(true)
		if err == nil || !errors.Is(err, rueidis.ErrNoCache) {
			a.watching.Store(err == nil)
			return cl, err
		}
		a.watchRefused.Store(&err)
	}
	a.watching.Store(false)
	return a.connectWith(false)
}

func (a *Actor) connectWith(watched bool) (rueidis.Client, error) {
	opt := a.opt.Client
	opt.DisableCache = true
	opt.ForceSingleClient = !a.opt.Cluster
	if a.opt.Cluster && opt.ClusterOption.ShardsRefreshInterval == 0 {
		// Without it rueidis refreshes its slot map only after an error:
		// after a failover the first request to a moved slot would go to
		// the dead master and fail (DisableRetry), a release included.
		opt.ClusterOption.ShardsRefreshInterval = healthInterval
	}
	if a.sentinel() && opt.Sentinel.TopologyRefreshInterval == 0 {
		// rueidis follows +switch-master; without this a missed message
		// leaves it on the demoted master for good.
		opt.Sentinel.TopologyRefreshInterval = healthInterval
	}
	opt.DisableRetry = true // the worker retries a broken connection itself, once
	// One connection per node: requests of one client reach the node in the
	// order the workers write them (scripts still tolerate reordering).
	opt.PipelineMultiplex = -1
	opt.SelectDB = a.opt.DB
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = a.opt.DialTimeout
	}
	if opt.ConnWriteTimeout == 0 {
		opt.ConnWriteTimeout = 3 * a.opt.DialTimeout
	}
	plain := opt // as given: explain dials it the way rueidis would
	if !a.opt.Cluster {
		// replaceConn closes what this dials (package doc, "Replies")
		dial, sentinels, noDelayOff := dialerOf(opt), map[string]bool{}, opt.DisableTCPNoDelay
		if a.sentinel() {
			for _, addr := range opt.InitAddress {
				sentinels[addr] = true // not the master's connection
			}
		}
		opt.DialFn = nil
		opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
			c, err := dial(ctx, dst, d, tc)
			if err != nil || sentinels[dst] {
				return c, err
			}
			if noDelayOff {
				// rueidis sets it on the conn it dialed; it cannot see
				// through the wrapper
				disableNoDelay(c)
			}
			t := &trackedConn{Conn: c, a: a, seq: a.dials.Add(1)}
			a.conns.Store(t, struct{}{})
			return t, nil
		}
	}
	if watched {
		a.watchOptions(&opt)
	}
	cl, err := rueidis.NewClient(opt)
	if err != nil {
		if watched && errors.Is(err, rueidis.ErrNoCache) {
			return nil, err
		}
		return nil, a.explain(err, plain)
	}
	if a.opt.Cluster && cl.Mode() != rueidis.ClientModeCluster {
		// rueidis falls back to a single-node client when the seeds are not
		// a cluster: two independent servers must never count as one node.
		cl.Close()
		return nil, fmt.Errorf("%w: %s was given cluster seeds but is not a Redis Cluster", ErrNotCluster, a.opt.Addr)
	}
	return cl, nil
}

// explain adds to the error of a failed connect what the node's answer
// (or silence) means and what to check. Where the error alone cannot
// tell, it asks the node once more: a plain PING, or a TLS handshake.
func (a *Actor) explain(err error, opt rueidis.ClientOption) error {
	// a node of one address that we dial as rueidis does: we can ask it
	addr, askable := "", !a.opt.Cluster && opt.DialCtxFn == nil && len(opt.InitAddress) == 1
	if askable {
		addr = opt.InitAddress[0]
	}
	timeout := opt.Dialer.Timeout
	switch {
	case IsAuthFailure(err):
		return fmt.Errorf("%w (check Config.Username and Config.Password, or the URL's user:password)", err)
	case isDBIndexError(err):
		return fmt.Errorf("%w (the node has no database %d: its databases setting bounds the index, 16 by default; check the URL's /db or ?db=)", err, a.opt.DB)
	case isUnknownHost(err):
		return fmt.Errorf("%w (check the node's host name)", err)
	case notRESP(err):
		if b := peek(addr, askable, timeout); len(b) > 0 {
			return fmt.Errorf("%w (not a Redis server: it answers %q)", err, firstLine(b))
		}
		return fmt.Errorf("%w (not a Redis server: its answer is not RESP)", err)
	case opt.TLSConfig == nil && closedAtOnce(err):
		// a cluster's seeds or a sentinel's list share one configuration:
		// the first tells
		if opt.DialCtxFn == nil && len(opt.InitAddress) > 0 && speaksTLS(opt.InitAddress[0], timeout) {
			return fmt.Errorf("%w (the node closed the connection at once, and it answers a TLS handshake: connections to it require TLS; set Config.TLS or use a rediss:// URL)", err)
		}
		return fmt.Errorf("%w (the node closed the connection without answering HELLO: it is not a Redis server, or a proxy with no server behind it)", err)
	case opt.TLSConfig != nil && speaksPlainRESP(peek(addr, askable, timeout)):
		return fmt.Errorf("%w (the node answers plain RESP, not TLS: drop Config.TLS or use a redis:// URL)", err)
	case errors.Is(err, context.DeadlineExceeded) && !isDialError(err):
		what := "HELLO"
		if opt.TLSConfig != nil {
			what = "the TLS handshake or HELLO"
		}
		return &NoAnswerError{What: what, Waited: timeout, Err: err}
	case a.sentinel() && strings.Contains(strings.ToLower(err.Error()), "unknown command"):
		return fmt.Errorf("%w (%s: the URL's addresses must be sentinels, not the master)", err, a.opt.Addr)
	case a.opt.Cluster && strings.Contains(err.Error(), "cluster support disabled"):
		return fmt.Errorf("%w: %s was given cluster seeds: %v", ErrNotCluster, a.opt.Addr, err)
	}
	return err
}

// peek sends addr a plain PING, without TLS, and returns the first bytes
// of its answer (none if ask is false or nothing came within timeout).
func peek(addr string, ask bool, timeout time.Duration) []byte {
	if !ask {
		return nil
	}
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return nil
	}
	b := make([]byte, 64)
	n, _ := io.ReadAtLeast(conn, b, 1)
	return b[:n]
}

// firstLine returns b up to its first line end, at most 32 bytes.
func firstLine(b []byte) []byte {
	if i := bytes.IndexAny(b, "\r\n"); i >= 0 {
		b = b[:i]
	}
	return b[:min(len(b), 32)]
}

// speaksPlainRESP reports whether answer, a node's answer to a plain PING
// (peek), is RESP. Asked after a TLS handshake failed, it tells a plain
// port from a network fault (a plain server reads the ClientHello as a
// command and waits, so the handshake only times out).
func speaksPlainRESP(answer []byte) bool {
	return len(answer) > 0 && (answer[0] == '+' || answer[0] == '-')
}

// speaksTLS reports whether addr answers a TLS handshake: asked after a
// plain HELLO got the connection closed, it tells a TLS-only port from one
// that speaks another protocol. The handshake checks no certificate, and
// nothing is sent over it.
func speaksTLS(addr string, timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	err = tls.Client(conn, &tls.Config{InsecureSkipVerify: true}).Handshake() //nolint:gosec // only to see whether the peer speaks TLS
	var oe *net.OpError
	// a TLS alert from the peer (a client certificate required...) is TLS too
	return err == nil || errors.As(err, &oe) && oe.Op == "remote error"
}

// closedAtOnce reports whether err says the peer closed or reset the
// connection during the handshake: what a TLS-only port does to a client
// speaking plain RESP (it reads the HELLO as a bad TLS record).
func closedAtOnce(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// keeper owns connecting, probing, health pings and the push connection.
// It is the only goroutine that touches the dedicated push client.
func (a *Actor) keeper() {
	cl, ok := a.dial()
	if !ok {
		return
	}
	a.client.Store(&cl)
	p := newPusher(a, cl)
	defer p.closeAll()
	if _, err := p.refreshSlots(); err != nil {
		a.opt.Logger.Warn("redlock: cannot read the cluster's slots", "node", a.opt.Addr, "err", err)
	}
	a.storeSlots(p.owner)
	caps, err := a.probe(cl, p)
	a.probeMarks(cl)
	a.caps.Store(&caps)
	if err != nil {
		a.lastErr.Store(&err)
		a.fatal.Store(&err)
	} else {
		a.fatal.Store(nil) // an earlier refusal of our credentials is over
		a.markUp(0)
	}
	a.readyO.Do(func() { close(a.ready) })

	ticker := time.NewTicker(healthInterval)
	defer ticker.Stop()
	p.open()
	p.reconcile()
	ticks := 0
	for {
		select {
		case <-a.done:
			return
		case err, ok := <-p.single():
			if ok { // closed: closeConn replaced the hooks
				a.pushBroken(p, cl, p.conns[""], err)
			}
		case <-a.subDirty:
			p.open()
			p.reconcile()
		case <-ticker.C:
			ticks++
			a.tend(p, cl, ticks)
		}
	}
}

// dial connects to the node, retrying with a backoff until it answers
// or the actor closes (ok false).
func (a *Actor) dial() (cl rueidis.Client, ok bool) {
	backoff := 20 * time.Millisecond
	for {
		c, err := a.connect()
		if err == nil {
			return c, true
		}
		a.markDown(err)
		if Unusable(err) {
			// The node will not serve us as configured: say so at once (New
			// fails when too many nodes did), and keep trying, slowly, in
			// case an operator fixes the node, its ACL or the DNS.
			a.fatal.Store(&err)
			a.readyO.Do(func() { close(a.ready) })
		}
		select {
		case <-a.done:
			return nil, false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// tend is the keeper's periodic work: the push connections' health, a
// PING, and, after a failover or a resharding, the slot map, the masters'
// configuration and the push connections again.
func (a *Actor) tend(p *pusher, cl rueidis.Client, ticks int) {
	for pc, err := range p.poll() {
		a.pushBroken(p, cl, pc, err)
	}
	if err := a.ping(cl); err != nil {
		return
	}
	if p.cluster && (ticks%slotsEvery == 0 || !p.complete() || len(p.masters()) == 0) {
		// A failover or a resharding moves slots: channels must be
		// subscribed on their new owner, and a new master needs the
		// keyspace flags. Messages sent meanwhile may be lost, so
		// waiters re-check (OnPushReset) once the new connections
		// are subscribed.
		changed, err := p.refreshSlots()
		if err == nil && changed {
			a.storeSlots(p.owner)
			p.closeAll()
			clear(p.retryAt)
			a.configureMasters(p)
			p.open()
			p.reconcile()
			if a.opt.OnPushReset != nil {
				a.opt.OnPushReset(a.opt.Index)
			}
		}
	}
	if a.sentinel() && sentinelMaster(cl) != a.Caps().Master {
		a.switched(p, cl)
	}
	if p.cluster && !p.allConfigured() {
		a.configureMasters(p)
	}
	if !p.complete() {
		p.open()
		p.reconcile()
	}
}

// pushBroken closes the failed push connection pc. A single node's is
// opened again at once if the node answers. On a cluster one master
// failed, and the others are fine. Its connection is opened again by the
// tick that found it broken, so at most once a tick, never in a loop.
func (a *Actor) pushBroken(p *pusher, cl rueidis.Client, pc *pushConn, err error) {
	if err != nil {
		a.markDown(err)
	}
	p.closeConn(pc)
	if p.cluster {
		delete(p.retryAt, pc.addr)
	} else if a.up.Load() || a.ping(cl) == nil {
		p.open()
		p.reconcile()
	}
}

func (a *Actor) ping(cl rueidis.Client) error {
	ctx, cancel := a.upkeep(a.opt.DialTimeout)
	defer cancel()
	start := time.Now()
	if !a.marking() {
		// a node that refuses PING itself answered: it is up
		if err := cl.Do(ctx, cl.B().Ping().Build()).Error(); err != nil && !refusesPing(err) {
			a.markDown(err)
			return err
		}
		a.markUp(time.Since(start))
		return nil
	}
	// The ping is a marker too (package doc, "Replies"): another request's
	// reply in its slot says the connection fell out of step. An idle
	// lane sends no marker, and a lane stuck behind a shift as long as its
	// batches sees none of its own: the ping's slot gets a later reply.
	//
	// Its slot is filled only once as many requests as replies were lost
	// were written after it: a shift longer than what the lanes write
	// within DialTimeout would never be found
	// (TestAdvLargeShiftHealsUnderLightTraffic). So the marker waits for its slot as
	// long as the actor lives (one at a time); the health verdict still
	// comes after DialTimeout.
	if !a.lateMark.CompareAndSwap(false, true) {
		err := fmt.Errorf("redlock: no reply yet to an earlier health PING: %w", context.DeadlineExceeded)
		a.markDown(err)
		return err
	}
	mark, dials := a.nextMark(), a.dials.Load()
	got := make(chan rueidis.RedisResult, 1)
	a.wg.Go(func() {
		rr := cl.Do(a.life, cl.B().Ping().Message(mark).Build())
		if outOfStep(rr, mark) {
			a.replaceConn(dials)
		}
		a.lateMark.Store(false) // before the keeper reads rr: its next ping may go
		got <- rr
	})
	var rr rueidis.RedisResult
	select {
	case rr = <-got:
	case <-ctx.Done():
		rr = rueidis.NewErrorResult(context.Cause(ctx))
	}
	if outOfStep(rr, mark) {
		return errOutOfStep
	}
	if err := rr.Error(); err != nil && !refusesPing(err) {
		a.markDown(err)
		return err
	} else if err != nil {
		a.markRefused(err) // an answer: the node is up, and gets no markers
	}
	a.markUp(time.Since(start))
	return nil
}

// Subscribe adds a reference to each channel; the push connection subscribes
// to channels that gain their first reference. It never blocks.
func (a *Actor) Subscribe(channels ...string) {
	a.subMu.Lock()
	for _, ch := range channels {
		if a.subWant[ch]++; a.subWant[ch] == 1 {
			a.subFresh[ch] = true
		}
	}
	a.subMu.Unlock()
	a.kick()
}

// Unsubscribe drops a reference to each channel; channels with no reference
// left are unsubscribed. It never blocks.
func (a *Actor) Unsubscribe(channels ...string) {
	a.subMu.Lock()
	for _, ch := range channels {
		if a.subWant[ch] <= 1 {
			delete(a.subWant, ch)
		} else {
			a.subWant[ch]--
		}
	}
	a.subMu.Unlock()
	a.kick()
}

func (a *Actor) kick() {
	select {
	case a.subDirty <- struct{}{}:
	default:
	}
}

// probe reads the node's capabilities. Each feature is probed on its own,
// never inferred from the version string. On a cluster the configuration
// (maxmemory policy, keyspace flags) is read and set on every master.
func (a *Actor) probe(cl rueidis.Client, p *pusher) (Capabilities, error) {
	ctx, cancel := a.upkeep(2 * a.opt.DialTimeout)
	defer cancel()
	caps := Capabilities{DedicatedPush: true, Probed: true, Cluster: p.cluster, Sentinel: a.sentinel()}
	if caps.Sentinel {
		caps.Master = sentinelMaster(cl)
	}
	if m, err := cl.Do(ctx, cl.B().Arbitrary("HELLO").Build()).ToMap(); err == nil {
		if p, ok := m["proto"]; ok {
			n, _ := p.AsInt64()
			caps.RESP3 = n == 3
		}
	}
	if !a.opt.ForceLua {
		probeNative(ctx, cl, a.opt.ProbeKey, &caps)
	}
	a.probeGuard(ctx, cl)
	err := a.configure(ctx, p, &caps)
	return caps, err
}

// DefaultProbeKey is the key the native-command probes name when
// Options.ProbeKey is empty.
const DefaultProbeKey = "redlock:probe:{capabilities}"

// probeNative tries each native compare-and-set/delete command on key. It
// compares with a fresh random value that no key can hold. A server with
// the command answers "not equal" (0 or nil) and writes nothing. One
// without it answers an error (unknown command, syntax error). So does a
// user whose ACL refuses the command or the key. Then the scripts are
// used, which need no more rights. A probe never creates, changes or
// deletes a key, whatever key holds.
func probeNative(ctx context.Context, cl rueidis.Client, key string, caps *Capabilities) {
	if key == "" {
		key = DefaultProbeKey
	}
	never := func() string { return "redlock-probe-" + randomHex() }
	r := cl.Do(ctx, cl.B().Arbitrary("DELEX").Keys(key).Args("IFEQ", never()).Build())
	if _, err := r.AsInt64(); err == nil {
		caps.NativeCAD = true
	}
	r = cl.Do(ctx, cl.B().Arbitrary("DELIFEQ").Keys(key).Args(never()).Build())
	if _, err := r.AsInt64(); err == nil {
		caps.NativeDELIFEQ = true
	}
	r = cl.Do(ctx, cl.B().Arbitrary("SET").Keys(key).Args(never(), "IFEQ", never(), "PX", "1000").Build())
	if err := r.Error(); err == nil || rueidis.IsRedisNil(err) {
		caps.NativeCAS = true
	}
}

func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// configure reads maxmemory-policy and merges the keyspace flags on every
// master (the one node, when not a cluster).
func (a *Actor) configure(ctx context.Context, p *pusher, caps *Capabilities) error {
	masters := p.masters()
	caps.Masters = len(masters)
	caps.Keyspace = a.opt.Keyspace != KeyspaceOff
	caps.ConfigRefused = false
	if p.cluster && len(masters) == 0 {
		// The slot map could not be read yet: the keeper retries, and
		// configures the masters once it knows them.
		a.opt.Logger.Warn("redlock: cluster slot map unknown; masters not configured yet", "node", a.opt.Addr)
		caps.Keyspace = false
		return nil
	}
	for _, m := range masters {
		cl, err := p.nodeClient(m)
		if err != nil {
			caps.Keyspace = false
			continue
		}
		where := a.opt.Addr
		if m != "" {
			where += " (master " + m + ")"
		}
		if pol, err := configGet(ctx, cl, "maxmemory-policy"); err == nil {
			caps.MaxmemoryPolicy = pol
			if mm, err := configGet(ctx, cl, "maxmemory"); pol != "noeviction" && (err != nil || mm != "0") {
				// volatile-* evicts exactly the keys with a TTL: ours. The
				// node guard holds such a node out (docs/lock.md, "When a
				// node forgot").
				a.opt.Logger.Warn("redlock: maxmemory-policy may evict lock keys (an eviction is an early expiry); set noeviction (the node guard holds this node out until then)",
					"node", where, "policy", pol)
			}
		}
		if caps.Sentinel {
			a.checkMinReplicas(ctx, cl, caps)
		}
		if a.opt.Keyspace == KeyspaceOff {
			p.configured[m] = true
			continue
		}
		flags, err := configGet(ctx, cl, "notify-keyspace-events")
		if err == nil {
			caps.KeyspaceFlags = flags
			merged := MergeKeyspaceFlags(flags)
			if merged != flags {
				err = cl.Do(ctx, cl.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", merged).Build()).Error()
				if err == nil {
					caps.KeyspaceFlags = merged
				}
			}
		}
		if err != nil {
			caps.ConfigRefused = true
			caps.Keyspace = false
			if a.opt.Keyspace == KeyspaceOn {
				return fmt.Errorf("%w: %s: %v", ErrKeyspaceUnavailable, where, err)
			}
			a.opt.Logger.Info("redlock: CONFIG refused; keyspace events off for this node, waiters rely on release messages and timers",
				"node", where, "err", err)
		}
		// an answer either way (a refusal is not retried every second)
		p.configured[m] = true
	}
	return nil
}

// configureMasters applies the configuration to the masters after the
// cluster's topology changed (a promoted replica does not inherit a
// CONFIG SET).
func (a *Actor) configureMasters(p *pusher) {
	ctx, cancel := a.upkeep(2 * a.opt.DialTimeout)
	defer cancel()
	caps := a.Caps()
	if err := a.configure(ctx, p, &caps); err != nil {
		a.opt.Logger.Warn("redlock: a new master could not be configured", "node", a.opt.Addr, "err", err)
	}
	a.caps.Store(&caps)
}

func configGet(ctx context.Context, cl rueidis.Client, name string) (string, error) {
	m, err := cl.Do(ctx, cl.B().ConfigGet().Parameter(name).Build()).AsStrMap()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("config %s not reported", name)
	}
	return v, nil
}

// MergeKeyspaceFlags returns flags with K, g and x added where missing,
// keeping every flag already set ("A" already covers g and x).
func MergeKeyspaceFlags(flags string) string {
	out := flags
	if !strings.Contains(out, "K") {
		out += "K"
	}
	hasA := strings.Contains(out, "A")
	if !hasA && !strings.Contains(out, "g") {
		out += "g"
	}
	if !hasA && !strings.Contains(out, "x") {
		out += "x"
	}
	return out
}

// markUp records an answer that took rtt.
func (a *Actor) markUp(rtt time.Duration) {
	// Several lanes (a cluster node has four) measure at once: a CAS loop
	// keeps every sample (a load-then-store lost some).
	for {
		old := a.ewmaNs.Load()
		next := int64(rtt)
		if old != 0 {
			next = old + (int64(rtt)-old)/8
		}
		if a.ewmaNs.CompareAndSwap(old, next) {
			break
		}
	}
	if !a.up.Swap(true) {
		a.opt.Logger.Info("redlock: node up", "node", a.opt.Addr)
	}
}

// markDown records a failure to reach the node (not a ctx cancel).
func (a *Actor) markDown(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	a.lastErr.Store(&err)
	if a.up.Swap(false) {
		a.opt.Logger.Warn("redlock: node down", "node", a.opt.Addr, "err", err)
	}
}

// Status is a snapshot of the node's health.
type Status struct {
	Addr    string
	Up      bool
	Latency time.Duration // EWMA of batch round trips
	Caps    Capabilities
	LastErr error
	Fatal   error // set when a required capability is missing or the node is Unusable
	// GuardScripts counts the scripts the node guard sent to the node
	// through this actor: its looks', its armings', its horizon raises and
	// its confirmation checks. GuardChecks counts those checks alone.
	GuardScripts, GuardChecks int64
}

// Status returns a snapshot of the node's health and capabilities.
func (a *Actor) Status() Status {
	s := Status{Addr: a.opt.Addr, Up: a.up.Load(), Latency: time.Duration(a.ewmaNs.Load()), Caps: *a.caps.Load(),
		GuardScripts: a.guardRuns.Load(), GuardChecks: a.guardChecks.Load()}
	if e := a.lastErr.Load(); e != nil {
		s.LastErr = *e
	}
	if e := a.unarmable.Load(); e != nil {
		s.LastErr = fmt.Errorf("%w: %w", ErrNotArmed, *e) // why the node guard could not arm it
	}
	if e := a.fatal.Load(); e != nil {
		s.Fatal = *e
	}
	return s
}

// Up reports whether the node answered its last batch or ping.
func (a *Actor) Up() bool { return a.up.Load() }

// Caps returns the node's probed capabilities (zero before the first probe).
func (a *Actor) Caps() Capabilities { return *a.caps.Load() }

// countGuard counts one of the node guard's scripts as it is sent (Status).
func (a *Actor) countGuard(g GuardCall) {
	a.guardRuns.Add(1)
	if g == GuardCheck {
		a.guardChecks.Add(1)
	}
}

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
	a.probeMarks(cl)
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

// dialerOf returns opt's dial: its own, or what rueidis does without one.
func dialerOf(opt rueidis.ClientOption) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	dialCtx, dial := opt.DialCtxFn, opt.DialFn
	return func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
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

// trackedConn is a connection the client dialed, known to replaceConn
// while it is open; seq numbers the dials.
type trackedConn struct {
	net.Conn
	a   *Actor
	seq uint64
}

// disableNoDelay turns Nagle's algorithm back on for c (a TCP or a TLS
// connection), as rueidis's DisableTCPNoDelay does.
func disableNoDelay(c net.Conn) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.SetNoDelay(false)
	}
}

func (c *trackedConn) Close() error {
	c.a.conns.Delete(c)
	return c.Conn.Close()
}

// replaceConn closes the client's connections dialed up to dials (the
// count when the out-of-step request was sent): one fell out of step
// (doMulti, ping). rueidis dials a fresh one for the next request, and
// the push connections are opened again (the keeper sees them end). A
// connection dialed since is fresh: a second detection of the same shift
// leaves it open.
func (a *Actor) replaceConn(dials uint64) {
	a.opt.Logger.Warn("redlock: a reply was lost on the connection (its replies fell out of step); replacing it", "node", a.opt.Addr)
	a.unsure.Store(false)
	a.conns.Range(func(k, _ any) bool {
		if c := k.(*trackedConn); c.seq <= dials {
			_ = c.Close()
		}
		return true
	})
}

// probeMarks sends one marker on a new client: a node that refuses PING
// (an ACL without it, a renamed command) gets no markers (markRefused).
func (a *Actor) probeMarks(cl rueidis.Client) {
	if !a.marking() {
		return
	}
	ctx, cancel := a.upkeep(a.opt.DialTimeout)
	defer cancel()
	rr := cl.Do(ctx, cl.B().Ping().Message(a.nextMark()).Build())
	if err := rr.Error(); refusesPing(err) {
		a.markRefused(err)
	} else if s, _ := rr.ToString(); err == nil && s == "PONG" {
		// a proxy in front answers PING itself, whatever its argument
		a.markRefused(errors.New("PING answered PONG, not its argument (a proxy that answers PING itself)"))
	}
}

// marking reports whether the lanes and the keeper send markers: not on
// a cluster node, nor on a node that refused PING.
func (a *Actor) marking() bool { return !a.opt.Cluster && !a.noMarks.Load() }

// markRefused turns markers off for good: the node does not answer PING
// with its argument (err says why). Its replies are then trusted in
// order, as any pipelined client's are.
func (a *Actor) markRefused(err error) {
	if a.noMarks.CompareAndSwap(false, true) {
		a.opt.Logger.Warn("redlock: PING <message> does not work on the node, so a reply lost on the connection cannot be detected (allow +ping for the ACL user; do not rename PING)",
			"node", a.opt.Addr, "err", err)
	}
}

// refusesPing reports whether err is the node's refusal of PING itself:
// an ACL without it, or the command renamed away.
func refusesPing(err error) bool {
	if _, ok := rueidis.IsRedisErr(err); !ok {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.HasPrefix(msg, "noperm") && strings.Contains(msg, "'ping' command") ||
		strings.Contains(msg, "unknown command 'ping'") || strings.Contains(msg, "unknown command `ping`")
}
