package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// sentinelTimeout bounds how long StartSentinelSet waits for the sentinels
// to find the replica and each other, and how long a failover may take.
const sentinelTimeout = 30 * time.Second

// SentinelSet is a Sentinel-managed master of real redis-servers on
// loopback ports, owned by one test: a master, one replica and three
// `redis-server --sentinel` processes. To redlock the set is ONE node of
// the quorum: list it with [SentinelSet.URL].
//
// The replica replicates through [SentinelSet.Link], a [Proxy]: cut it
// (SetFault) and the replica stops receiving writes, so a failover then
// promotes a replica that lacks them (a lossy failover).
type SentinelSet struct {
	t         testing.TB
	Name      string    // the master set's name
	Master    *Server   // the master at start (a failover changes roles)
	Replica   *Server   // the replica at start
	Link      *Proxy    // the replica's replication link to Master
	Sentinels []*Server // the sentinels
	// Fronts are the proxies in front of the sentinels, one each, when
	// SentinelOptions.Fronted is set (nil otherwise). Each sentinel
	// announces its proxy's address, so a client that learns the others
	// from one (SENTINEL SENTINELS, +sentinel) reaches them through their
	// proxies too, and [SentinelSet.URL] names the proxies.
	Fronts []*Proxy
}

// SentinelOptions configures [StartSentinelSet].
type SentinelOptions struct {
	// Name is the master set's name; "" means "redlock-set".
	Name string
	// Server configures the master and the replica.
	Server ServerOptions
	// DownAfter is the sentinels' down-after-milliseconds; 0 means 1 s.
	DownAfter time.Duration
	// Fronted puts a proxy in front of each sentinel (SentinelSet.Fronts):
	// a test can then drop what the sentinels publish to clients (say, a
	// +switch-master, with Proxy.DropValues) and nothing else.
	Fronted bool
}

// StartSentinelSet starts a master, a replica of it (through a proxy) and
// three sentinels that monitor it with quorum 2. It waits until every
// sentinel knows the replica and the other two sentinels. The sentinels'
// failover-timeout is 60 s, so within a test they never re-point the
// replica around the proxy.
func StartSentinelSet(t testing.TB, opts SentinelOptions) *SentinelSet {
	t.Helper()
	RequireRedis(t)
	if opts.Name == "" {
		opts.Name = "redlock-set"
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = time.Second
	}
	s := &SentinelSet{t: t, Name: opts.Name}
	s.Master = StartServer(t, opts.Server)
	s.Link = NewProxy(t, s.Master.Addr())
	host, port, _ := splitAddr(s.Link.Addr())
	ropts := opts.Server
	ropts.Args = append(append([]string(nil), opts.Server.Args...), "--replicaof", host, port)
	if opts.Server.Password != "" {
		ropts.Args = append(ropts.Args, "--masterauth", opts.Server.Password)
	}
	s.Replica = StartServer(t, ropts)
	mhost, mport, _ := splitAddr(s.Master.Addr())
	for range 3 {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		lines := []string{
			fmt.Sprintf("sentinel monitor %s %s %s 2", opts.Name, mhost, mport),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", opts.Name, opts.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s 60000", opts.Name),
			fmt.Sprintf("sentinel parallel-syncs %s 1", opts.Name),
		}
		if opts.Server.Password != "" {
			lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", opts.Name, opts.Server.Password))
		}
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatalf("write sentinel.conf: %v", err)
		}
		p, err := redisproc.Start(redisproc.Config{ConfFile: conf, Args: []string{"--sentinel"}})
		if err != nil {
			t.Fatalf("start sentinel: %v", err)
		}
		sv := &Server{t: t, p: p}
		t.Cleanup(sv.cleanup)
		s.Sentinels = append(s.Sentinels, sv)
		if opts.Fronted {
			front := NewProxy(t, sv.Addr())
			fhost, fport, _ := splitAddr(front.Addr())
			for _, kv := range [][2]string{{"announce-ip", fhost}, {"announce-port", fport}} {
				if _, err := sv.Do("SENTINEL", "CONFIG", "SET", kv[0], kv[1]); err != nil {
					t.Fatalf("sentinel %s: SENTINEL CONFIG SET %s: %v", sv.Addr(), kv[0], err)
				}
			}
			s.Fronts = append(s.Fronts, front)
		}
	}
	s.waitSentinels(opts)
	if err := s.waitReplicaSynced(s.Master, s.Replica); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitSentinels waits until every sentinel sees the replica and the two
// other sentinels (and, fronted, knows the fronts), or fails the test
// after sentinelTimeout.
func (s *SentinelSet) waitSentinels(opts SentinelOptions) {
	deadline := time.Now().Add(sentinelTimeout)
	ready := func() bool {
		for _, sv := range s.Sentinels {
			m, err := sv.Do("SENTINEL", "MASTER", opts.Name)
			if err != nil || sentinelField(m, "num-slaves") != "1" || sentinelField(m, "num-other-sentinels") != "2" {
				return false
			}
			if opts.Fronted && !s.knowsFronts(sv) {
				return false
			}
		}
		return true
	}
	for !ready() {
		if time.Now().After(deadline) {
			m, err := s.Sentinels[0].Do("SENTINEL", "MASTER", opts.Name)
			s.t.Fatalf("sentinels not ready within %v: %s %v", sentinelTimeout, m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL returns the node URL of the set, in rueidis's form:
// "redis://s1?master_set=NAME&addr=s2&addr=s3".
func (s *SentinelSet) URL() string {
	u := "redis://"
	if pw := s.Master.opts.Password; pw != "" {
		u += ":" + pw + "@"
	}
	addrs := make([]string, len(s.Sentinels))
	for i, sv := range s.Sentinels {
		addrs[i] = sv.Addr()
		if s.Fronts != nil {
			addrs[i] = s.Fronts[i].Addr()
		}
	}
	u += addrs[0] + "?master_set=" + s.Name
	for _, a := range addrs[1:] {
		u += "&addr=" + a
	}
	return u
}

// knowsFronts reports whether sentinel sv names every other sentinel by
// its front's address, and by no other.
func (s *SentinelSet) knowsFronts(sv *Server) bool {
	r, err := sv.Do("SENTINEL", "SENTINELS", s.Name)
	if err != nil {
		return false
	}
	known := 0
	for i, other := range s.Sentinels {
		if other == sv {
			continue
		}
		_, rport, _ := splitAddr(other.Addr())
		_, fport, _ := splitAddr(s.Fronts[i].Addr())
		if strings.Contains(r, "port "+rport+" ") || strings.Contains(r, "port "+rport+"]") {
			return false
		}
		if strings.Contains(r, "port "+fport+" ") || strings.Contains(r, "port "+fport+"]") {
			known++
		}
	}
	return known == len(s.Sentinels)-1
}

// MasterAddr returns the master's address as the first sentinel that
// answers reports it.
func (s *SentinelSet) MasterAddr() (string, error) {
	var err error
	for _, sv := range s.Sentinels {
		var r string
		if r, err = sv.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name); err == nil {
			f := strings.Fields(strings.Trim(r, "[]"))
			if len(f) == 2 {
				return f[0] + ":" + f[1], nil
			}
			err = fmt.Errorf("sentinel %s: bad reply %q", sv.Addr(), r)
		}
	}
	return "", err
}

// Current returns the server that the sentinels name as master.
func (s *SentinelSet) Current() *Server {
	s.t.Helper()
	addr, err := s.MasterAddr()
	if err != nil {
		s.t.Fatalf("sentinel set %s: %v", s.Name, err)
	}
	for _, sv := range []*Server{s.Master, s.Replica} {
		if sv.Addr() == addr {
			return sv
		}
	}
	s.t.Fatalf("sentinel set %s: master %s is neither server", s.Name, addr)
	return nil
}

// Failover asks a sentinel for a failover (SENTINEL FAILOVER, which
// promotes the replica as it is, without waiting for it to catch up), retried while
// the sentinels see no healthy replica yet, and waits until every sentinel names the
// new master and the new master reports role:master. It returns the new
// master.
func (s *SentinelSet) Failover() *Server {
	s.t.Helper()
	old := s.Current()
	deadline := time.Now().Add(sentinelTimeout)
	for {
		// NOGOODSLAVE while the sentinels have not yet seen a replica that
		// came back (a failed-over master) as healthy: ask again.
		_, err := s.Sentinels[0].Do("SENTINEL", "FAILOVER", s.Name)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "NOGOODSLAVE") || time.Now().After(deadline) {
			s.t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s.WaitSwitch(old)
}

// splitElectionWait is how long WaitSwitch waits before it forces the
// failover: the sentinels' election of a leader can split (each votes for
// itself), and a failed one ends after 10 s and is retried only after twice
// failover-timeout (120 s here).
const splitElectionWait = 6 * time.Second

// WaitSwitch waits until every sentinel names a master other than old and
// that server reports role:master, and returns it. Past splitElectionWait
// while every sentinel still names old, it sends SENTINEL FAILOVER to the
// sentinels in turn, once a second, until one takes it (refused with
// INPROG while an election runs).
func (s *SentinelSet) WaitSwitch(old *Server) *Server {
	s.t.Helper()
	start := time.Now()
	deadline := start.Add(sentinelTimeout)
	forced, next := false, time.Time{}
	for i := 0; ; i++ {
		cur, ok := s.agreedMaster()
		if ok && cur != old {
			if info, err := cur.Do("INFO", "replication"); err == nil && infoField(info, "role") == "master" {
				return cur
			}
		}
		if !forced && ok && cur == old && time.Since(start) > splitElectionWait && time.Now().After(next) {
			sv := s.Sentinels[i%len(s.Sentinels)]
			if _, err := sv.Do("SENTINEL", "FAILOVER", s.Name); err == nil {
				forced = true
				s.t.Logf("sentinel set %s: no switch after %v (a split election?): SENTINEL FAILOVER on %s",
					s.Name, time.Since(start).Round(time.Millisecond), sv.Addr())
			}
			next = time.Now().Add(time.Second)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("sentinel set %s: no switch away from %s within %v", s.Name, old.Addr(), sentinelTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agreedMaster returns the server every sentinel names as master.
func (s *SentinelSet) agreedMaster() (*Server, bool) {
	var addr string
	for _, sv := range s.Sentinels {
		r, err := sv.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name)
		if err != nil {
			return nil, false
		}
		f := strings.Fields(strings.Trim(r, "[]"))
		if len(f) != 2 || (addr != "" && addr != f[0]+":"+f[1]) {
			return nil, false
		}
		addr = f[0] + ":" + f[1]
	}
	for _, sv := range []*Server{s.Master, s.Replica} {
		if sv.Addr() == addr {
			return sv, true
		}
	}
	return nil, false
}

// WaitSyncedTo waits until replica has acknowledged every write master
// took so far: after a failover, the old master replicates the new one.
func (s *SentinelSet) WaitSyncedTo(master, replica *Server) {
	s.t.Helper()
	if err := s.waitReplicaSynced(master, replica); err != nil {
		s.t.Fatal(err)
	}
}

// CutLink cuts replica's replication link for good (see [CutLink]).
func (s *SentinelSet) CutLink(replica *Server) {
	s.t.Helper()
	CutLink(s.t, replica, s.Master, s.Replica)
}

// WaitSynced waits until the replica has acknowledged every write the
// master took so far (its offset reached the master's).
func (s *SentinelSet) WaitSynced() {
	s.t.Helper()
	if err := s.waitReplicaSynced(s.Master, s.Replica); err != nil {
		s.t.Fatal(err)
	}
}

func (s *SentinelSet) waitReplicaSynced(master, replica *Server) error {
	deadline := time.Now().Add(sentinelTimeout)
	for {
		mi, err1 := master.Do("INFO", "replication")
		ri, err2 := replica.Do("INFO", "replication")
		if err1 == nil && err2 == nil && infoField(ri, "master_link_status") == "up" {
			mo, _ := strconv.ParseInt(infoField(mi, "master_repl_offset"), 10, 64)
			ro, _ := strconv.ParseInt(infoField(ri, "slave_repl_offset"), 10, 64)
			if mo > 0 && ro >= mo {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not in sync with %s within %v", replica.Addr(), master.Addr(), sentinelTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sentinelField returns the value after name in a flat SENTINEL MASTER
// reply rendered as "[k1 v1 k2 v2 ...]".
func sentinelField(reply, name string) string {
	f := strings.Fields(strings.Trim(reply, "[]"))
	for i := 0; i+1 < len(f); i += 2 {
		if f[i] == name {
			return f[i+1]
		}
	}
	return ""
}

// splitAddr splits "host:port".
func splitAddr(addr string) (host, port string, err error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", fmt.Errorf("%q is not host:port", addr)
	}
	return addr[:i], addr[i+1:], nil
}
