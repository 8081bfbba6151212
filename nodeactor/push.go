package nodeactor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// numSlots is the number of hash slots of a Redis Cluster.
const numSlots = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key's hash tag (the part between the first '{' and the next '}', if not
// empty) or of the whole key, modulo 16384.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % numSlots
}

// isKeyspaceChannel reports whether ch is a keyspace-event channel. Keyspace
// events are published by the node that owns the key, on classic pub/sub;
// our own channels use sharded pub/sub on a cluster.
func isKeyspaceChannel(ch string) bool { return strings.HasPrefix(ch, "__keyspace@") }

// pushConn is one dedicated connection that receives push messages.
type pushConn struct {
	addr   string // the master it is connected to ("" on a single node)
	dc     rueidis.DedicatedClient
	active map[string]bool
	// errc receives the connection's failure; it is closed when closeConn
	// removes the hooks. The keeper reads it: see pusher.single and poll.
	errc <-chan error
}

// pusher owns the push connections of one node. A single node has one
// dedicated connection. A Redis Cluster has one per master, subscribed to
// the channels whose slot that master owns. Ours use SSUBSCRIBE; keyspace
// events use SUBSCRIBE, as a node publishes them only for its own keys.
// Only the keeper goroutine uses it.
type pusher struct {
	a       *Actor
	cl      rueidis.Client
	cluster bool
	owner   []string // cluster: slot -> master address ("" = unknown)
	conns   map[string]*pushConn
	opened  map[string]bool      // masters that had a push connection before
	retryAt map[string]time.Time // a master whose push connection failed is retried after this
	// configured records the masters whose configuration (keyspace flags)
	// succeeded; the keeper retries the others.
	configured map[string]bool
}

// pushRetry is how long a master whose push connection failed is left alone.
const pushRetry = time.Second

func newPusher(a *Actor, cl rueidis.Client) *pusher {
	return &pusher{a: a, cl: cl, cluster: a.opt.Cluster, conns: map[string]*pushConn{},
		opened: map[string]bool{}, retryAt: map[string]time.Time{}, configured: map[string]bool{}}
}

// allConfigured reports whether every master was configured.
func (p *pusher) allConfigured() bool {
	for _, m := range p.masters() {
		if !p.configured[m] {
			return false
		}
	}
	return true
}

// masters returns the addresses of the masters that own slots, sorted.
func (p *pusher) masters() []string {
	if !p.cluster {
		return []string{""}
	}
	seen := map[string]bool{}
	for _, m := range p.owner {
		if m != "" {
			seen[m] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// refreshSlots reads the cluster's slot owners. It reports whether they
// changed since the last read.
func (p *pusher) refreshSlots() (bool, error) {
	if !p.cluster {
		return false, nil
	}
	ctx, cancel := p.a.upkeep(2 * p.a.opt.DialTimeout)
	defer cancel()
	ranges, err := p.cl.Do(ctx, p.cl.B().Arbitrary("CLUSTER", "SLOTS").Build()).ToArray()
	if err != nil {
		return false, err
	}
	owner := make([]string, numSlots)
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return false, fmt.Errorf("CLUSTER SLOTS: malformed reply")
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		nd, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(nd) < 2 || lo < 0 || hi >= numSlots || lo > hi {
			return false, fmt.Errorf("CLUSTER SLOTS: malformed reply")
		}
		host, _ := nd[0].ToString()
		port, _ := nd[1].AsInt64()
		addr := fmt.Sprintf("%s:%d", host, port)
		if strings.Contains(host, ":") {
			addr = fmt.Sprintf("[%s]:%d", host, port)
		}
		if host == "" || host == "?" {
			// an unknown endpoint: the node the client already knows on
			// that port (rueidis substitutes the address it asked)
			addr = ""
			for known := range p.cl.Nodes() {
				if strings.HasSuffix(known, fmt.Sprintf(":%d", port)) {
					addr = known
				}
			}
		}
		for s := lo; s <= hi; s++ {
			owner[s] = addr
		}
	}
	changed := !slices.Equal(owner, p.owner)
	p.owner = owner
	return changed, nil
}

// nodeClient returns a client for one master of a cluster (or the node's
// own client on a single node).
func (p *pusher) nodeClient(addr string) (rueidis.Client, error) {
	if !p.cluster {
		return p.cl, nil
	}
	if c, ok := p.cl.Nodes()[addr]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("cluster master %s not known to the client yet", addr)
}

// connFor returns the address of the connection that must carry ch.
func (p *pusher) connFor(ch string) (string, bool) {
	if !p.cluster {
		return "", true
	}
	if p.owner == nil {
		return "", false
	}
	m := p.owner[Slot(ch)]
	return m, m != ""
}

// open makes a push connection to every master that has none.
func (p *pusher) open() {
	now := time.Now()
	for _, addr := range p.masters() {
		if p.conns[addr] != nil || now.Before(p.retryAt[addr]) {
			continue
		}
		cl, err := p.nodeClient(addr)
		if err != nil {
			p.retryAt[addr] = now.Add(pushRetry)
			continue
		}
		d, rel := cl.Dedicate()
		ch := d.SetPubSubHooks(rueidis.PubSubHooks{
			OnMessage: func(m rueidis.PubSubMessage) {
				if p.a.opt.OnPush != nil {
					p.a.opt.OnPush(p.a.opt.Index, m.Channel, m.Message)
				}
			},
		})
		if ch == nil {
			rel()
			continue
		}
		select {
		case <-ch: // failed at once (the master is down): retry later
			rel()
			p.retryAt[addr] = now.Add(pushRetry)
			continue
		default:
		}
		p.conns[addr] = &pushConn{addr: addr, dc: d, active: map[string]bool{}, errc: ch}
		if p.opened[addr] && p.a.opt.OnPushReset != nil {
			p.a.opt.OnPushReset(p.a.opt.Index)
		}
		p.opened[addr] = true
	}
}

// single returns the failure channel of a single node's push connection:
// the keeper waits on it with its other events. It is nil on a cluster,
// whose connections poll checks on every tick, and while there is none.
func (p *pusher) single() <-chan error {
	if pc := p.conns[""]; pc != nil && !p.cluster {
		return pc.errc
	}
	return nil
}

// poll returns the push connections that failed, with their errors.
func (p *pusher) poll() map[*pushConn]error {
	var out map[*pushConn]error
	for _, pc := range p.conns {
		select {
		case err := <-pc.errc:
			if out == nil {
				out = map[*pushConn]error{}
			}
			out[pc] = err
		default:
		}
	}
	return out
}

// complete reports whether every master has a push connection.
func (p *pusher) complete() bool {
	for _, addr := range p.masters() {
		if p.conns[addr] == nil {
			return false
		}
	}
	return true
}

func (p *pusher) closeConn(pc *pushConn) {
	if p.conns[pc.addr] != pc {
		return
	}
	pc.dc.SetPubSubHooks(rueidis.PubSubHooks{})
	// Closed, not put back: rueidis would unsubscribe it first and wait,
	// without a deadline, for a node that may have stopped answering.
	pc.dc.Close()
	delete(p.conns, pc.addr)
}

func (p *pusher) closeAll() {
	for _, pc := range p.conns {
		p.closeConn(pc)
	}
}

// reconcile subscribes the wanted channels that are not active on their
// connection and unsubscribes the active ones nobody wants any more.
func (p *pusher) reconcile() {
	a := p.a
	a.subMu.Lock()
	want := make(map[string]bool, len(a.subWant))
	for ch := range a.subWant {
		want[ch] = true
	}
	fresh := make([]string, 0, len(a.subFresh))
	for ch := range a.subFresh {
		fresh = append(fresh, ch)
	}
	clear(a.subFresh)
	a.subMu.Unlock()

	// A channel unsubscribed and subscribed again before this reconcile is
	// still active: confirm it again for the new subscriber.
	var again []string
	for _, ch := range fresh {
		if addr, ok := p.connFor(ch); ok && p.conns[addr] != nil && p.conns[addr].active[ch] {
			again = append(again, ch)
		}
	}
	if len(again) > 0 && a.opt.OnSubscribed != nil {
		a.opt.OnSubscribed(a.opt.Index, again)
	}
	add := map[*pushConn][]string{}
	for ch := range want {
		addr, ok := p.connFor(ch)
		if pc := p.conns[addr]; ok && pc != nil && !pc.active[ch] {
			add[pc] = append(add[pc], ch)
		}
	}
	del := map[*pushConn][]string{}
	for _, pc := range p.conns {
		for ch := range pc.active {
			if !want[ch] {
				del[pc] = append(del[pc], ch)
			}
		}
	}
	ctx, cancel := a.upkeep(2 * a.opt.DialTimeout)
	defer cancel()
	for pc, chs := range add {
		if err := p.send(ctx, pc, chs, true); err != nil {
			a.markDown(err)
			p.closeConn(pc)
			continue
		}
		for _, ch := range chs {
			pc.active[ch] = true
		}
		if a.opt.OnSubscribed != nil {
			a.opt.OnSubscribed(a.opt.Index, chs)
		}
	}
	for pc, chs := range del {
		if p.conns[pc.addr] != pc {
			continue
		}
		if err := p.send(ctx, pc, chs, false); err != nil {
			a.markDown(err)
			p.closeConn(pc)
			continue
		}
		for _, ch := range chs {
			delete(pc.active, ch)
		}
	}
}

// send subscribes (or unsubscribes) chs on pc: classic pub/sub on a single
// node and for keyspace events, sharded pub/sub for our channels on a
// cluster.
func (p *pusher) send(ctx context.Context, pc *pushConn, chs []string, sub bool) error {
	var classic, sharded []string
	for _, ch := range chs {
		if p.cluster && !isKeyspaceChannel(ch) {
			sharded = append(sharded, ch)
		} else {
			classic = append(classic, ch)
		}
	}
	var errs []error
	if len(classic) > 0 {
		cmd := pc.dc.B().Subscribe().Channel(classic...).Build()
		if !sub {
			cmd = pc.dc.B().Unsubscribe().Channel(classic...).Build()
		}
		errs = append(errs, pc.dc.Do(ctx, cmd).Error())
	}
	// SSUBSCRIBE takes channels of one slot per command.
	slices.SortFunc(sharded, func(x, y string) int { return int(Slot(x)) - int(Slot(y)) })
	for i := 0; i < len(sharded); {
		j := i + 1
		for j < len(sharded) && Slot(sharded[j]) == Slot(sharded[i]) {
			j++
		}
		cmd := pc.dc.B().Ssubscribe().Channel(sharded[i:j]...).Build()
		if !sub {
			cmd = pc.dc.B().Sunsubscribe().Channel(sharded[i:j]...).Build()
		}
		errs = append(errs, pc.dc.Do(ctx, cmd).Error())
		i = j
	}
	return errors.Join(errs...)
}
