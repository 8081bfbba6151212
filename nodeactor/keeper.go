package nodeactor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Capabilities are what the probes found on a node.
type Capabilities struct {
	RESP3           bool   // the command connection speaks RESP3
	NativeCAD       bool   // DELEX key IFEQ value works
	NativeCAS       bool   // SET key value IFEQ value PX ms works
	Keyspace        bool   // keyspace del/expired events are enabled ("Kgx" or wider)
	KeyspaceFlags   string // notify-keyspace-events as last read ("" if CONFIG is refused)
	ConfigRefused   bool   // CONFIG GET/SET was refused (ACL, managed service, miniredis)
	MaxmemoryPolicy string // "" if unknown
	DedicatedPush   bool   // push messages use their own connection
	Probed          bool
}

// ErrKeyspaceUnavailable means KeyspaceOn was asked for and the node refused
// to enable keyspace events.
var ErrKeyspaceUnavailable = errors.New("redlock: keyspace events required but cannot be enabled")

func (a *Actor) connect() (rueidis.Client, error) {
	opt := a.opt.Client
	opt.DisableCache = true
	opt.ForceSingleClient = true
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
	return rueidis.NewClient(opt)
}

// keeper owns connecting, probing, health pings and the push connection.
// It is the only goroutine that touches the dedicated push client.
func (a *Actor) keeper() {
	backoff := 20 * time.Millisecond
	var cl rueidis.Client
	for {
		c, err := a.connect()
		if err == nil {
			cl = c
			break
		}
		a.markDown(err)
		select {
		case <-a.done:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	a.client.Store(&cl)
	caps, err := a.probe(cl)
	a.caps.Store(&caps)
	if err != nil {
		a.lastErr.Store(&err)
		a.fatal.Store(&err)
	} else {
		a.markUp(0)
	}
	a.readyO.Do(func() { close(a.ready) })

	ticker := time.NewTicker(healthInterval)
	defer ticker.Stop()
	var (
		dc      rueidis.DedicatedClient
		release func()
		perr    <-chan error
		active  = map[string]bool{}
		opened  bool
	)
	closePush := func() {
		if release != nil {
			dc.SetPubSubHooks(rueidis.PubSubHooks{})
			release()
		}
		dc, release, perr = nil, nil, nil
		clear(active)
	}
	defer closePush()
	openPush := func() {
		d, rel := cl.Dedicate()
		ch := d.SetPubSubHooks(rueidis.PubSubHooks{
			OnMessage: func(m rueidis.PubSubMessage) {
				if a.opt.OnPush != nil {
					a.opt.OnPush(a.opt.Index, m.Channel, m.Message)
				}
			},
		})
		if ch == nil {
			rel()
			return
		}
		dc, release, perr = d, rel, ch
		if opened && a.opt.OnPushReset != nil {
			a.opt.OnPushReset(a.opt.Index)
		}
		opened = true
	}
	reconcile := func() {
		if dc == nil {
			return
		}
		a.subMu.Lock()
		var add, del, again []string
		for ch := range a.subWant {
			if !active[ch] {
				add = append(add, ch)
			}
		}
		// A channel unsubscribed and subscribed again before this reconcile
		// is still active: confirm it again for the new subscriber.
		for ch := range a.subFresh {
			if active[ch] {
				again = append(again, ch)
			}
		}
		clear(a.subFresh)
		for ch := range active {
			if _, ok := a.subWant[ch]; !ok {
				del = append(del, ch)
			}
		}
		a.subMu.Unlock()
		if len(again) > 0 && a.opt.OnSubscribed != nil {
			a.opt.OnSubscribed(a.opt.Index, again)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*a.opt.DialTimeout)
		defer cancel()
		if len(add) > 0 {
			if err := dc.Do(ctx, dc.B().Subscribe().Channel(add...).Build()).Error(); err != nil {
				a.markDown(err)
				closePush()
				return
			}
			for _, ch := range add {
				active[ch] = true
			}
			if a.opt.OnSubscribed != nil {
				a.opt.OnSubscribed(a.opt.Index, add)
			}
		}
		if len(del) > 0 {
			if err := dc.Do(ctx, dc.B().Unsubscribe().Channel(del...).Build()).Error(); err != nil {
				a.markDown(err)
				closePush()
				return
			}
			for _, ch := range del {
				delete(active, ch)
			}
		}
	}
	openPush()
	reconcile()
	for {
		select {
		case <-a.done:
			return
		case err := <-perr:
			if err != nil {
				a.markDown(err)
			}
			closePush()
			if a.up.Load() || a.ping(cl) == nil {
				openPush()
				reconcile()
			}
		case <-a.subDirty:
			if dc == nil {
				openPush()
			}
			reconcile()
		case <-ticker.C:
			if err := a.ping(cl); err != nil {
				continue
			}
			if dc == nil {
				openPush()
				reconcile()
			}
		}
	}
}

func (a *Actor) ping(cl rueidis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.opt.DialTimeout)
	defer cancel()
	start := time.Now()
	err := cl.Do(ctx, cl.B().Ping().Build()).Error()
	if err != nil {
		a.markDown(err)
		return err
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
// never inferred from the version string.
func (a *Actor) probe(cl rueidis.Client) (Capabilities, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*a.opt.DialTimeout)
	defer cancel()
	caps := Capabilities{DedicatedPush: true, Probed: true}
	if m, err := cl.Do(ctx, cl.B().Arbitrary("HELLO").Build()).ToMap(); err == nil {
		if p, ok := m["proto"]; ok {
			n, _ := p.AsInt64()
			caps.RESP3 = n == 3
		}
	}
	const probeKey = "redlock:probe:{capabilities}"
	if !a.opt.ForceLua {
		r := cl.Do(ctx, cl.B().Arbitrary("DELEX").Keys(probeKey).Args("IFEQ", "x").Build())
		if _, err := r.AsInt64(); err == nil {
			caps.NativeCAD = true
		}
		r = cl.Do(ctx, cl.B().Arbitrary("SET").Keys(probeKey).Args("x", "IFEQ", "x", "PX", "1000").Build())
		if err := r.Error(); err == nil || rueidis.IsRedisNil(err) {
			caps.NativeCAS = true
		}
	}
	if pol, err := configGet(ctx, cl, "maxmemory-policy"); err == nil {
		caps.MaxmemoryPolicy = pol
		if pol != "noeviction" && !strings.HasPrefix(pol, "volatile-") {
			a.opt.Logger.Warn("redlock: maxmemory-policy may evict lock keys (an eviction is an early expiry); use noeviction or volatile-*",
				"node", a.opt.Addr, "policy", pol)
		}
	}
	if a.opt.Keyspace == KeyspaceOff {
		return caps, nil
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
		if a.opt.Keyspace == KeyspaceOn {
			return caps, fmt.Errorf("%w: %v", ErrKeyspaceUnavailable, err)
		}
		a.opt.Logger.Info("redlock: CONFIG refused; keyspace events off for this node, waiters rely on release messages and timers",
			"node", a.opt.Addr, "err", err)
		return caps, nil
	}
	caps.Keyspace = true
	return caps, nil
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
