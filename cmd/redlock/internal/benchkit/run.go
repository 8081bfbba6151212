package benchkit

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/internal/scripts"
)

// Options configure a benchmark run.
type Options struct {
	Addrs    []string // nodes to use; nil means start redis-servers (or miniredis with Embedded)
	Embedded bool
	Warmup   time.Duration
	Window   time.Duration
	Repeat   int
	Only     []string // workload ids; empty means all
	Impls    []string // implementation ids; empty means all
	NodeSets []int    // node counts to run; empty means {3, 1} (or {len(Addrs), 1})
	Lua      string   // lock.lua body for the floor; "" means the library's own (internal/scripts/lock.lua)
	// Peers are other libraries' implementations, run after redlock's and
	// the floor (the bench module passes redsync, bsm/redislock and
	// rueidislock; `redlock bench` passes none).
	Peers []Impl
	// PeersNote, when set, is printed under the header (`redlock bench`
	// says where the peers are measured).
	PeersNote string

	Handoffs   int           // W2 handoffs to measure (after 10 warm-up ones)
	HandoffMax time.Duration // W2 time cap per run
	Settle     time.Duration // W2: how long the waiter waits before the holder releases

	Progress io.Writer // live progress line; nil means none
}

// Result is one (node count, workload, implementation) cell.
type Result struct {
	Nodes    int       `json:"nodes"`
	Workload string    `json:"workload"`
	Impl     string    `json:"impl"`
	ImplID   string    `json:"impl_id"`
	Repeats  []Metrics `json:"repeats"`
	Median   Metrics   `json:"median"`
	Err      string    `json:"error,omitempty"`
	// Derived figures (filled by Run).
	LimitFraction float64 `json:"limit_fraction,omitempty"` // ops/s ÷ physical limit (W1, W5, FairLock, MultiLock, Semaphore; RWLock: (reads + 8·writes)/s ÷ 160)
	FloorRatio    float64 `json:"floor_ratio,omitempty"`    // W2/W3/CountDownLatch: p50 ÷ floor W3 p50
	FloorOpsRatio float64 `json:"floor_ops_ratio,omitempty"`
}

// Report is everything a run produced.
type Report struct {
	Started      time.Time         `json:"started"`
	Duration     time.Duration     `json:"duration_ns"`
	GoVersion    string            `json:"go_version"`
	GOMAXPROCS   int               `json:"gomaxprocs"`
	NumCPU       int               `json:"num_cpu"`
	Servers      string            `json:"servers"`
	Library      string            `json:"library"` // git state of the library under test
	Embedded     bool              `json:"embedded"`
	Addrs        []string          `json:"addrs"`
	Warmup       time.Duration     `json:"warmup_ns"`
	Window       time.Duration     `json:"window_ns"`
	Repeat       int               `json:"repeat"`
	Settle       time.Duration     `json:"w2_settle_ns"`
	Handoffs     int               `json:"w2_handoffs"`
	HandoffMax   time.Duration     `json:"w2_handoff_max_ns"`
	ImplNotes    map[string]string `json:"impl_notes"`
	PeersNote    string            `json:"peers_note,omitempty"`
	Results      []Result          `json:"results"`
	workloads    []Workload
	implOrder    []Impl
	nodeSetOrder []int
}

// Progress is the live status line.
type Progress struct {
	Ops   atomic.Int64
	mu    sync.Mutex
	label string
	start time.Time
	est   time.Duration
	idx   int
	total int
}

func (p *Progress) set(idx, total int, label string, est time.Duration) {
	p.mu.Lock()
	p.idx, p.total, p.label, p.start, p.est = idx, total, label, time.Now(), est
	p.mu.Unlock()
	p.Ops.Store(0)
}

func (p *Progress) line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	el := time.Since(p.start)
	ops := p.Ops.Load()
	rate := 0.0
	if el > 0 {
		rate = float64(ops) / el.Seconds()
	}
	return fmt.Sprintf("[%d/%d] %s  %4.1fs/%.0fs  ops %d (%.0f/s)", p.idx, p.total, p.label, el.Seconds(), p.est.Seconds(), ops, rate)
}

func (p *Progress) run(w io.Writer, stop <-chan struct{}) {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	if !tty {
		t.Reset(2 * time.Second)
	}
	for {
		select {
		case <-stop:
			if tty {
				fmt.Fprint(w, "\r\x1b[K")
			}
			return
		case <-t.C:
			if tty {
				fmt.Fprint(w, "\r\x1b[K"+p.line())
			} else {
				fmt.Fprintln(w, p.line())
			}
		}
	}
}

type caseSpec struct {
	nodes int
	w     Workload
	impl  Impl
}

// caseEstimate guesses how long one run of cs takes (for the progress line).
func caseEstimate(o Options, cs caseSpec) time.Duration {
	setup := 300 * time.Millisecond
	if cs.w.ID != "W2" {
		return o.Warmup + o.Window + setup
	}
	if strings.HasPrefix(cs.impl.ID, "redlock") {
		return min(o.HandoffMax, time.Duration(o.Handoffs+10)*(o.Settle+2*time.Millisecond)) + setup
	}
	return o.HandoffMax + setup // peers poll: they usually hit the cap
}

func applies(impl Impl, w Workload, nodes int) bool {
	if impl.MaxNodes > 0 && nodes > impl.MaxNodes {
		return false
	}
	if impl.Uncontended && w.Contended {
		return false
	}
	if w.Primitive && (impl.NewCoordinator == nil || impl.ID != "redlock-notify") {
		return false
	}
	// The polling strategy is compared on the contended lock workloads only.
	if impl.ID == "redlock-polling" && w.ID != "W1" && w.ID != "W5" {
		return false
	}
	return true
}

func match(list []string, id string) bool {
	if len(list) == 0 {
		return true
	}
	for _, x := range list {
		if strings.EqualFold(strings.TrimSpace(x), id) {
			return true
		}
	}
	return false
}

// Run starts servers if needed, runs every selected case and returns the
// report. Servers it started are stopped before it returns.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Repeat <= 0 {
		o.Repeat = 1
	}
	if o.Window <= 0 {
		o.Window = 3 * time.Second
	}
	if o.Handoffs <= 0 {
		o.Handoffs = 200
	}
	if o.HandoffMax <= 0 {
		o.HandoffMax = 15 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 10 * time.Millisecond
	}
	var err error
	rep := &Report{PeersNote: o.PeersNote, Started: time.Now(), GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		Embedded: o.Embedded, Warmup: o.Warmup, Window: o.Window, Repeat: o.Repeat, Settle: o.Settle, Handoffs: o.Handoffs, HandoffMax: o.HandoffMax, ImplNotes: map[string]string{}}

	addrs := o.Addrs
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("node %s unreachable: %w", a, err)
		}
		c.Close()
	}
	if len(addrs) == 0 {
		want := 3
		for _, n := range o.NodeSets {
			want = max(want, n)
		}
		var srv *Servers
		if o.Embedded {
			srv, err = StartEmbedded(want)
		} else {
			srv, err = StartRedisServers(want)
		}
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		addrs = srv.Addrs
	}
	rep.Addrs = addrs
	rep.Library = libraryState()
	rep.Servers = describeServers(ctx, addrs, o.Embedded, len(o.Addrs) == 0)

	sets := o.NodeSets
	if len(sets) == 0 {
		sets = []int{len(addrs), 1}
	}
	var nodeSets []int
	for _, n := range sets {
		if n >= 1 && n <= len(addrs) && !slices.Contains(nodeSets, n) {
			nodeSets = append(nodeSets, n)
		}
	}
	if len(nodeSets) == 0 {
		return nil, fmt.Errorf("no usable node count in %v for %d nodes", sets, len(addrs))
	}
	rep.nodeSetOrder = nodeSets

	lua, luaFrom := floorScript(o.Lua)
	impls := append(Own(Settings{Lua: lua}), o.Peers...)
	for i := range impls {
		if impls[i].ID == "floor" {
			impls[i].Note += "; script: " + luaFrom
		}
	}
	var selImpls []Impl
	for _, im := range impls {
		if match(o.Impls, im.ID) {
			selImpls = append(selImpls, im)
			rep.ImplNotes[im.Name] = im.Note
		}
	}
	rep.implOrder = selImpls
	var selW []Workload
	for _, w := range Workloads() {
		if match(o.Only, w.ID) {
			selW = append(selW, w)
		}
	}
	rep.workloads = selW

	var cases []caseSpec
	for _, n := range nodeSets {
		for _, w := range selW {
			for _, im := range selImpls {
				if applies(im, w, n) {
					cases = append(cases, caseSpec{n, w, im})
				}
			}
		}
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("nothing to run: no implementation applies to the selected workloads and node counts")
	}

	if o.Progress != nil {
		var est time.Duration
		for _, cs := range cases {
			est += time.Duration(o.Repeat) * caseEstimate(o, cs)
		}
		fmt.Fprintf(o.Progress, "%d runs (%d cells × %d), about %s\n", len(cases)*o.Repeat, len(cases), o.Repeat, est.Round(10*time.Second))
	}
	prog := &Progress{}
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	if o.Progress != nil {
		pwg.Go(func() { prog.run(o.Progress, stop) })
	}
	defer func() { close(stop); pwg.Wait() }()

	runID := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	for ci, cs := range cases {
		res := Result{Nodes: cs.nodes, Workload: cs.w.ID, Impl: cs.impl.Name, ImplID: cs.impl.ID}
		for r := range o.Repeat {
			if err := ctx.Err(); err != nil {
				rep.derive()
				rep.Duration = time.Since(rep.Started)
				return rep, err
			}
			est := caseEstimate(o, cs)
			prog.set(ci+1, len(cases), fmt.Sprintf("%d-node %s %s rep %d/%d", cs.nodes, cs.w.ID, cs.impl.Name, r+1, o.Repeat), est)
			e := &env{impl: cs.impl, addrs: addrs[:cs.nodes], warmup: o.Warmup, window: o.Window,
				prefix:   fmt.Sprintf("bench:%s:%d:%s:%s:%d", runID, cs.nodes, cs.w.ID, cs.impl.ID, r),
				progress: prog, handoffs: o.Handoffs, handoffMax: o.HandoffMax, settle: o.Settle}
			m, err := cs.w.run(e)
			if err != nil {
				res.Err = err.Error()
				break
			}
			res.Repeats = append(res.Repeats, m)
		}
		if len(res.Repeats) > 0 {
			res.Median = median(res.Repeats)
		}
		rep.Results = append(rep.Results, res)
	}
	rep.derive()
	rep.Duration = time.Since(rep.Started)
	return rep, nil
}

func (r *Report) find(nodes int, w, implID string) *Result {
	for i := range r.Results {
		x := &r.Results[i]
		if x.Nodes == nodes && x.Workload == w && x.ImplID == implID && x.Err == "" && len(x.Repeats) > 0 {
			return x
		}
	}
	return nil
}

func (r *Report) derive() {
	ws := map[string]Workload{}
	for _, w := range Workloads() {
		ws[w.ID] = w
	}
	for i := range r.Results {
		x := &r.Results[i]
		if x.Err != "" || len(x.Repeats) == 0 {
			continue
		}
		if w := ws[x.Workload]; w.Limit > 0 {
			x.LimitFraction = w.Throughput(x.Median) / w.Limit
		}
		floorW3 := r.find(x.Nodes, "W3", "floor")
		switch x.Workload {
		case "W2", "W3", WLatch:
			if floorW3 != nil && floorW3.Median.P50 > 0 {
				x.FloorRatio = float64(x.Median.P50) / float64(floorW3.Median.P50)
			}
			if x.Workload == "W3" && floorW3 != nil && floorW3.Median.OpsPerSec > 0 {
				x.FloorOpsRatio = x.Median.OpsPerSec / floorW3.Median.OpsPerSec
			}
		case "W4":
			if f := r.find(x.Nodes, "W4", "floor"); f != nil && f.Median.OpsPerSec > 0 {
				x.FloorOpsRatio = x.Median.OpsPerSec / f.Median.OpsPerSec
			}
		}
	}
}

// floorScript picks the floor's script: the one given with --lua, else the
// library's own (internal/scripts/lock.lua).
func floorScript(explicit string) (body, from string) {
	if explicit != "" {
		return explicit, "given with --lua"
	}
	return scripts.Lock, "the library's Lock script (internal/scripts/lock.lua)"
}

// describeServers reports the server version for the header.
func describeServers(ctx context.Context, addrs []string, embedded, started bool) string {
	if embedded {
		return fmt.Sprintf("%d × miniredis (embedded, in-process): NOT COMPARABLE with real servers", len(addrs))
	}
	ver := "?"
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addrs[0]}, DisableCache: true})
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if s, err := c.Do(cctx, c.B().Info().Section("server").Build()).ToString(); err == nil {
			for _, line := range strings.Split(s, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
					ver = v
				}
			}
		}
		cancel()
		c.Close()
	}
	how := "given with -nodes"
	if started {
		how = "started by the bench on loopback, --save '' --appendonly no"
	}
	return fmt.Sprintf("%d × redis-server %s (%s)", len(addrs), ver, how)
}

// libraryState describes the library checkout the bench was built against
// (best effort): the git state of the repository this source file was
// compiled from when it is still there, else the VCS stamp of the binary,
// else "".
func libraryState() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
			s := "library at " + strings.TrimSpace(string(out))
			if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
				s += " + uncommitted changes"
			}
			return s
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, mod := "", false
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				rev = kv.Value
			case "vcs.modified":
				mod = kv.Value == "true"
			}
		}
		if len(rev) > 7 {
			rev = rev[:7]
		}
		if rev != "" {
			s := "library at " + rev
			if mod {
				s += " + uncommitted changes"
			}
			return s
		}
	}
	return ""
}
