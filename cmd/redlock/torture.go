package main

// redlock torture: a bounded soak on real redis-server processes.
//
// The parent starts --nodes redis-server processes of its own (appendonly,
// appendfsync always, so a kill -9 and restart keeps the data), re-executes
// itself --procs times as worker processes (the hidden `torture --worker`
// mode) that compete through Lock, MultiLock, RWLock, FairLock and
// Semaphore, and while they do it runs a fault schedule, derived from
// --seed, on a minority of the nodes at a time: SIGSTOP/SIGCONT for 0.5–2 s,
// kill -9 and a restart on the same port after more than the TTL, and short
// pauses that act as injected delays. Workers print every critical section as
// a JSON line on their stdout (wall-clock enter and exit; all processes share
// the machine's clock); the parent checks the intervals across processes.
//
// Everything is bounded: the run ends by itself, and the parent kills only
// the processes it started, by PID, also on Ctrl-C.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/redisproc"
	"github.com/redlock-go/redlock/primitives"
)

const (
	// tortureLockNames is how many Lock names the Lock and MultiLock workers share.
	tortureLockNames = 6
	// tortureMultiSize is the size of each (overlapping) MultiLock set.
	tortureMultiSize = 3
	// tortureSemPermits is the permit count of the Semaphore workload.
	tortureSemPermits = 2
	// tortureLostSlack is how late after its Deadline a Lost() channel may be
	// observed closing and still count as signalled by the deadline.
	tortureLostSlack = 5 * time.Millisecond
)

const tortureUsageText = `usage: redlock torture [--duration 2m] [--procs 4] [--nodes 3] [--ttl 1s] [--seed 1] [--json]

Starts its own redis-server nodes (appendonly, appendfsync always) and --procs
worker processes that compete through Lock, MultiLock (overlapping sets of 3
names), RWLock (readers and writers), FairLock and a Semaphore of 2 permits,
each worker with its own Coordinator per primitive, while a fault schedule
derived from --seed pauses (SIGSTOP), slows and kill -9/restarts a minority of
the nodes at a time. Every critical section is checked across processes.
Exit 0 only if there was no safety violation, no fence regression, every lost
lease was signalled by its deadline and every primitive made progress; 1
otherwise; 2 on bad flags; 130 when interrupted. Needs redis-server in PATH
(or the server binary named by $REDLOCK_REDIS_SERVER).

`

type tortureConfig struct {
	duration time.Duration
	procs    int
	nodes    int
	ttl      time.Duration
	seed     uint64
	json     bool
}

// torture is `redlock torture`; `torture --worker ...` is the worker mode
// the parent re-executes itself in.
func torture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "--worker" {
		return runTortureWorker(ctx, args[1:], stdout, stderr)
	}
	cfg, err := parseTortureFlags(args, stderr)
	if err != nil {
		return err
	}
	return runTorture(ctx, cfg, stdout, stderr)
}

func parseTortureFlags(args []string, stderr io.Writer) (tortureConfig, error) {
	var cfg tortureConfig
	fs := flag.NewFlagSet("torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tortureUsageText)
		fs.PrintDefaults()
	}
	fs.DurationVar(&cfg.duration, "duration", 2*time.Minute, "how long the workers run (1s..24h)")
	fs.IntVar(&cfg.procs, "procs", 4, "number of worker processes (1..32)")
	fs.IntVar(&cfg.nodes, "nodes", 3, "number of redis-server nodes to start (1..9); faults need 3 or more")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "lease TTL of every primitive (100ms..30s)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the fault schedule and of the workers' choices")
	fs.BoolVar(&cfg.json, "json", false, "print the summary as JSON on stdout (the table goes to stderr)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, &codeError{code: 2, err: err}
	}
	usage := func(format string, a ...any) error {
		return &codeError{code: 2, err: fmt.Errorf(format, a...)}
	}
	switch {
	case fs.NArg() > 0:
		return cfg, usage("unexpected argument %q", fs.Arg(0))
	case cfg.duration < time.Second || cfg.duration > 24*time.Hour:
		return cfg, usage("--duration must be 1s..24h (got %s)", cfg.duration)
	case cfg.procs < 1 || cfg.procs > 32:
		return cfg, usage("--procs must be 1..32 (got %d)", cfg.procs)
	case cfg.nodes < 1 || cfg.nodes > 9:
		return cfg, usage("--nodes must be 1..9 (got %d)", cfg.nodes)
	case cfg.ttl < coordinator.MinTTL || cfg.ttl > 30*time.Second:
		return cfg, usage("--ttl must be 100ms..30s (got %s)", cfg.ttl)
	}
	return cfg, nil
}

// ---------------------------------------------------------------------------
// Records exchanged between workers and the parent (JSON lines).

// csRecord is one critical section. Times are wall-clock Unix nanoseconds.
// Enter is stamped after Acquire returned and Valid() was checked; exit is
// stamped before Release (or Downgrade) is called.
type csRecord struct {
	Type      string   `json:"type"` // "cs"
	Worker    int      `json:"worker"`
	Primitive string   `json:"primitive"` // lock, multilock, rwlock, fairlock, semaphore
	Resource  string   `json:"resource"`
	Names     []string `json:"names,omitempty"` // Lock names held (Lock and MultiLock)
	Kind      string   `json:"kind"`            // exclusive, read, write, permit
	Permits   int      `json:"permits,omitempty"`
	Enter     int64    `json:"enter_unix_nanos"`
	Exit      int64    `json:"exit_unix_nanos"`
	Fence     uint64   `json:"fence"`
	// LeaseDeadline is Deadline() at acquisition, converted to wall clock.
	LeaseDeadline int64 `json:"lease_deadline_unix_nanos"`
	// FinalDeadline is Deadline() at exit (it moves on renewal; after a loss
	// it is the deadline the lease was lost at).
	FinalDeadline int64 `json:"final_deadline_unix_nanos"`
	Lost          bool  `json:"lost"`
	LostAt        int64 `json:"lost_at_unix_nanos"` // when Lost() was seen closed; 0 if never
	AcquireNanos  int64 `json:"acquire_nanos"`
	AutoRenew     bool  `json:"auto_renew"`
	Downgrade     bool  `json:"downgrade,omitempty"` // a read lease obtained by Downgrade
	// WorkerStall is, for a loss seen later than the deadline plus the
	// slack, how late the worker's own 2 ms probe timer woke up between the
	// deadline and the moment the loss was seen: the time the worker process
	// itself could not run (machine overload), as opposed to a late Lost().
	WorkerStall int64 `json:"worker_stall_nanos,omitempty"`
}

// end is the effective end of the holder's validity: the exit, or the
// deadline (or the moment the loss was seen) when the lease was lost.
func (r *csRecord) end() int64 {
	e := r.Exit
	if r.Lost {
		if r.FinalDeadline > 0 {
			e = min(e, r.FinalDeadline)
		}
		if r.LostAt > 0 {
			e = min(e, r.LostAt)
		}
	}
	return e
}

func (r *csRecord) exclusive() bool { return r.Kind == "exclusive" || r.Kind == "write" }

// workerEnd is a worker's last line.
type workerEnd struct {
	Type             string         `json:"type"` // "end"
	Worker           int            `json:"worker"`
	Baseline         int            `json:"baseline_goroutines"`
	Goroutines       int            `json:"goroutines"`
	Leaked           int            `json:"leaked"`
	Attempts         map[string]int `json:"acquire_calls"` // Acquire calls per primitive
	AcquireErrors    map[string]int `json:"acquire_errors,omitempty"`
	FirstErrors      []string       `json:"first_errors,omitempty"`
	ReleaseErrors    int            `json:"release_errors"`
	InvalidOnArrival int            `json:"invalid_on_arrival"`
}

// ---------------------------------------------------------------------------
// Worker process.

type tortureWorker struct {
	id    int
	ttl   time.Duration
	outMu sync.Mutex
	out   io.Writer

	mu            sync.Mutex
	attempts      map[string]int
	acqErrs       map[string]int
	firstErrs     []string
	releaseErrors atomic.Int64
	invalid       atomic.Int64
	lag           lagMonitor
}

// lagMonitor measures how late a 2 ms timer wakes up in this process: the
// time the process could not run (CPU contention on a loaded machine, GC).
type lagMonitor struct {
	mu   sync.Mutex
	ring [4096]lagSample
	n    int
}

type lagSample struct {
	at   int64 // wake-up, Unix nanoseconds
	late time.Duration
}

const lagPeriod = 2 * time.Millisecond

func (m *lagMonitor) run(ctx context.Context) {
	t := time.NewTimer(lagPeriod)
	defer t.Stop()
	for {
		start := time.Now()
		t.Reset(lagPeriod)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if late := now.Sub(start) - lagPeriod; late > time.Millisecond {
			m.mu.Lock()
			m.ring[m.n%len(m.ring)] = lagSample{at: now.UnixNano(), late: late}
			m.n++
			m.mu.Unlock()
		}
	}
}

// maxLag returns the largest lateness of a wake-up in [from, to].
func (m *lagMonitor) maxLag(from, to int64) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var worst time.Duration
	for i := max(0, m.n-len(m.ring)); i < m.n; i++ {
		if s := m.ring[i%len(m.ring)]; s.at >= from && s.at <= to && s.late > worst {
			worst = s.late
		}
	}
	return worst
}

func (w *tortureWorker) emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	w.outMu.Lock()
	defer w.outMu.Unlock()
	_, _ = w.out.Write(append(b, '\n'))
}

func (w *tortureWorker) acquireError(prim string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.acqErrs[prim]++
	if len(w.firstErrs) < 5 {
		w.firstErrs = append(w.firstErrs, prim+": "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
}

func runTortureWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	baseline := runtime.NumGoroutine()
	fs := flag.NewFlagSet("torture --worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.Int("id", 0, "worker id")
	nodesFlag := fs.String("nodes", "", "node addresses")
	ttl := fs.Duration("ttl", time.Second, "lease TTL")
	duration := fs.Duration("duration", 10*time.Second, "run time")
	seed := fs.Uint64("seed", 1, "seed")
	if err := fs.Parse(args); err != nil {
		return &codeError{code: 2, err: err}
	}
	nodes := nodesFrom(*nodesFlag)
	if len(nodes) == 0 {
		return &codeError{code: 2, err: errors.New("worker: no nodes")}
	}
	w := &tortureWorker{id: *id, ttl: *ttl, out: stdout, acqErrs: map[string]int{}, attempts: map[string]int{}}

	var coords []*coordinator.Coordinator
	closeAll := func() {
		for _, c := range coords {
			_ = c.Close()
		}
		coords = nil
	}
	defer closeAll()
	newCoord := func() (*coordinator.Coordinator, error) {
		c, err := coordinator.New(ctx, coordinator.Config{
			Nodes: nodes, DefaultTTL: *ttl, Logger: quietLogger(), StartTimeout: 20 * time.Second,
		})
		if err == nil {
			coords = append(coords, c)
		}
		return c, err
	}
	// One Coordinator per primitive: lock, multilock, rwlock, fairlock, semaphore.
	var cs [5]*coordinator.Coordinator
	for i := range cs {
		c, err := newCoord()
		if err != nil {
			return err
		}
		cs[i] = c
	}
	var names []string
	for i := range tortureLockNames {
		names = append(names, "t-n"+strconv.Itoa(i))
	}
	rw, err := primitives.NewRWLock(cs[2], "t-rw", primitives.WithTTL(*ttl))
	if err != nil {
		return err
	}

	w.emit(map[string]any{"type": "ready", "worker": w.id})
	runCtx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	rng := func(loop uint64) *rand.Rand {
		return rand.New(rand.NewPCG(*seed, uint64(*id)<<16|loop))
	}
	var wg sync.WaitGroup
	for g := range 2 {
		r := rng(uint64(1 + g))
		wg.Go(func() { w.lockLoop(runCtx, r, cs[0], names) })
	}
	{
		r := rng(10)
		wg.Go(func() { w.multiLoop(runCtx, r, cs[1], names) })
	}
	for g := range 2 {
		r := rng(uint64(20 + g))
		wg.Go(func() { w.readLoop(runCtx, r, rw) })
	}
	{
		r := rng(30)
		wg.Go(func() { w.writeLoop(runCtx, r, rw) })
	}
	{
		r := rng(40)
		wg.Go(func() { w.fairLoop(runCtx, r, cs[3]) })
	}
	for g := range 2 {
		r := rng(uint64(50 + g))
		wg.Go(func() { w.semLoop(runCtx, r, cs[4]) })
	}
	wg.Go(func() { w.lag.run(runCtx) })
	wg.Wait()
	cancel()
	closeAll()

	// Goroutines left after every coordinator was closed; allow the
	// runtime a moment to reap the ones that are already returning.
	n := runtime.NumGoroutine()
	for wait := time.Now().Add(3 * time.Second); n > baseline && time.Now().Before(wait); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	end := workerEnd{
		Type: "end", Worker: w.id, Baseline: baseline, Goroutines: n, Leaked: max(0, n-baseline),
		Attempts: w.attempts, AcquireErrors: w.acqErrs, FirstErrors: w.firstErrs,
		ReleaseErrors: int(w.releaseErrors.Load()), InvalidOnArrival: int(w.invalid.Load()),
	}
	w.mu.Unlock()
	w.emit(end)
	return nil
}

// holdPlan says how long a critical section lasts.
type holdPlan struct {
	work   time.Duration
	expire bool // use the non-renewing variant and hold until the lease is lost
}

// plan picks a hold: mostly 1–30 ms, with probability long longer than the
// TTL (so that renewals must succeed through the faults), and with
// probability expire a lease without auto-renewal held until it is lost (so
// that losses are measured).
func (w *tortureWorker) plan(r *rand.Rand, long, expire float64) holdPlan {
	switch x := r.Float64(); {
	case x < expire:
		return holdPlan{work: 3 * w.ttl, expire: true}
	case x < expire+long:
		return holdPlan{work: time.Duration(float64(w.ttl) * (1.2 + 1.3*r.Float64()))}
	default:
		return holdPlan{work: time.Millisecond + time.Duration(r.Int64N(int64(30*time.Millisecond)))}
	}
}

type holdSpec struct {
	prim, resource, kind string
	names                []string
	permits              int
	autoRenew            bool
}

func pause(ctx context.Context, r *rand.Rand, upTo time.Duration) {
	t := time.NewTimer(time.Duration(r.Int64N(int64(upTo))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// acquire calls Acquire and measures it; on error it counts it and backs off.
func (w *tortureWorker) acquire(ctx context.Context, prim string, l primitives.Locker) (*primitives.Lease, time.Duration) {
	w.mu.Lock()
	w.attempts[prim]++
	w.mu.Unlock()
	t0 := time.Now()
	lease, err := l.Acquire(ctx)
	d := time.Since(t0)
	if err != nil {
		if ctx.Err() == nil {
			w.acquireError(prim, err)
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		return nil, d
	}
	return lease, d
}

// critical runs one critical section on lease and reports it. It returns
// false when the lease was not valid on arrival (nothing was reported).
func (w *tortureWorker) critical(ctx context.Context, s holdSpec, lease *primitives.Lease, acq time.Duration, work time.Duration, downgrade bool) bool {
	if !lease.Valid() {
		w.invalid.Add(1)
		return false
	}
	enter := time.Now()
	rec := csRecord{
		Type: "cs", Worker: w.id, Primitive: s.prim, Resource: s.resource, Names: s.names, Kind: s.kind,
		Permits: s.permits, Enter: enter.UnixNano(), Fence: lease.Fence(),
		LeaseDeadline: wallNanos(lease.Deadline()), AcquireNanos: int64(acq), AutoRenew: s.autoRenew, Downgrade: downgrade,
	}
	var lostAt time.Time
	t := time.NewTimer(work)
	select {
	case <-t.C:
	case <-lease.Lost():
		lostAt = time.Now()
	case <-ctx.Done():
	}
	t.Stop()
	exit := time.Now()
	if !lease.Valid() {
		rec.Lost = true
		if lostAt.IsZero() {
			// Valid() turned false: Lost() must close by the deadline.
			t := time.NewTimer(w.ttl + time.Second)
			select {
			case <-lease.Lost():
				lostAt = time.Now()
			case <-t.C: // never signalled: reported with lost_at 0
			}
			t.Stop()
		}
	}
	rec.Exit = exit.UnixNano()
	rec.FinalDeadline = wallNanos(lease.Deadline())
	if !lostAt.IsZero() {
		rec.LostAt = lostAt.UnixNano()
		if rec.LostAt > rec.FinalDeadline+int64(tortureLostSlack) {
			// Late: was this process itself unable to run meanwhile? The
			// probe that overslept wakes at about the same time as we did.
			time.Sleep(25 * time.Millisecond)
			rec.WorkerStall = int64(w.lag.maxLag(rec.FinalDeadline, rec.LostAt+int64(25*time.Millisecond)))
		}
	}
	w.emit(rec)
	return true
}

func (w *tortureWorker) release(lease *primitives.Lease) {
	if err := lease.Release(context.Background()); err != nil && !errors.Is(err, primitives.ErrLeaseLost) {
		if w.releaseErrors.Add(1) <= 3 {
			w.mu.Lock()
			w.firstErrs = append(w.firstErrs, "release: "+strings.ReplaceAll(err.Error(), "\n", "; "))
			w.mu.Unlock()
		}
	}
}

// hold acquires l, runs one critical section of plan p and releases.
func (w *tortureWorker) hold(ctx context.Context, s holdSpec, l primitives.Locker, p holdPlan) {
	lease, acq := w.acquire(ctx, s.prim, l)
	if lease == nil {
		return
	}
	w.critical(ctx, s, lease, acq, p.work, false)
	w.release(lease)
}

func (w *tortureWorker) lockLoop(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator, names []string) {
	renewing := make([]*primitives.Lock, len(names))
	expiring := make([]*primitives.Lock, len(names))
	for i, name := range names {
		var err error
		if renewing[i], err = primitives.NewLock(c, name, primitives.WithTTL(w.ttl)); err != nil {
			w.acquireError("lock", err)
			return
		}
		if expiring[i], err = primitives.NewLock(c, name, primitives.WithTTL(w.ttl), primitives.WithAutoRenew(false)); err != nil {
			w.acquireError("lock", err)
			return
		}
	}
	for ctx.Err() == nil {
		i := r.IntN(len(names))
		p := w.plan(r, 0.02, 0.015)
		l := renewing[i]
		if p.expire {
			l = expiring[i]
		}
		w.hold(ctx, holdSpec{prim: "lock", resource: names[i], names: []string{names[i]}, kind: "exclusive", autoRenew: !p.expire}, l, p)
		pause(ctx, r, 10*time.Millisecond)
	}
}

func (w *tortureWorker) multiLoop(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator, names []string) {
	type set struct {
		names              []string
		renewing, expiring *primitives.MultiLock
	}
	var sets []set
	for i := range names {
		var s set
		for k := range tortureMultiSize {
			s.names = append(s.names, names[(i+k)%len(names)])
		}
		slices.Sort(s.names)
		var err error
		if s.renewing, err = primitives.NewMultiLock(c, s.names, primitives.WithTTL(w.ttl)); err != nil {
			w.acquireError("multilock", err)
			return
		}
		if s.expiring, err = primitives.NewMultiLock(c, s.names, primitives.WithTTL(w.ttl), primitives.WithAutoRenew(false)); err != nil {
			w.acquireError("multilock", err)
			return
		}
		sets = append(sets, s)
	}
	for ctx.Err() == nil {
		s := sets[r.IntN(len(sets))]
		p := w.plan(r, 0.02, 0.015)
		l := s.renewing
		if p.expire {
			l = s.expiring
		}
		w.hold(ctx, holdSpec{prim: "multilock", resource: strings.Join(s.names, "+"), names: s.names, kind: "exclusive", autoRenew: !p.expire}, l, p)
		pause(ctx, r, 10*time.Millisecond)
	}
}

func (w *tortureWorker) readLoop(ctx context.Context, r *rand.Rand, rw *primitives.RWLock) {
	for ctx.Err() == nil {
		w.hold(ctx, holdSpec{prim: "rwlock", resource: "t-rw", kind: "read", autoRenew: true}, rw.Reader(), w.plan(r, 0.01, 0))
		pause(ctx, r, 20*time.Millisecond)
	}
}

func (w *tortureWorker) fairLoop(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator) {
	renewing, err := primitives.NewFairLock(c, "t-fair", primitives.WithTTL(w.ttl))
	if err != nil {
		w.acquireError("fairlock", err)
		return
	}
	expiring, err := primitives.NewFairLock(c, "t-fair", primitives.WithTTL(w.ttl), primitives.WithAutoRenew(false))
	if err != nil {
		w.acquireError("fairlock", err)
		return
	}
	for ctx.Err() == nil {
		p := w.plan(r, 0.02, 0.015)
		l := renewing
		if p.expire {
			l = expiring
		}
		w.hold(ctx, holdSpec{prim: "fairlock", resource: "t-fair", kind: "exclusive", autoRenew: !p.expire}, l, p)
		pause(ctx, r, 10*time.Millisecond)
	}
}

func (w *tortureWorker) semLoop(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator) {
	renewing, err := primitives.NewSemaphore(c, "t-sem", tortureSemPermits, primitives.WithTTL(w.ttl))
	if err != nil {
		w.acquireError("semaphore", err)
		return
	}
	expiring, err := primitives.NewSemaphore(c, "t-sem", tortureSemPermits, primitives.WithTTL(w.ttl), primitives.WithAutoRenew(false))
	if err != nil {
		w.acquireError("semaphore", err)
		return
	}
	for ctx.Err() == nil {
		p := w.plan(r, 0.02, 0.015)
		l := renewing
		if p.expire {
			l = expiring
		}
		w.hold(ctx, holdSpec{prim: "semaphore", resource: "t-sem", kind: "permit", permits: tortureSemPermits, autoRenew: !p.expire}, l, p)
		pause(ctx, r, 10*time.Millisecond)
	}
}

// writeLoop takes the writer; one write in five is downgraded to a read
// lease (the write interval ends before Downgrade is called).
func (w *tortureWorker) writeLoop(ctx context.Context, r *rand.Rand, rw *primitives.RWLock) {
	s := holdSpec{prim: "rwlock", resource: "t-rw", kind: "write", autoRenew: true}
	for ctx.Err() == nil {
		p := w.plan(r, 0.03, 0)
		downgrade := r.IntN(5) == 0
		lease, acq := w.acquire(ctx, s.prim, rw.Writer())
		if lease != nil {
			ok := w.critical(ctx, s, lease, acq, p.work, false)
			if ok && downgrade && lease.Valid() && ctx.Err() == nil {
				read, err := rw.Downgrade(ctx, lease)
				if err == nil {
					rs := holdSpec{prim: "rwlock", resource: "t-rw", kind: "read", autoRenew: true}
					w.critical(ctx, rs, read, 0, time.Duration(r.Int64N(int64(20*time.Millisecond))), true)
					w.release(read)
				}
			}
			w.release(lease) // a no-op after a successful Downgrade
		}
		pause(ctx, r, 30*time.Millisecond)
	}
}

// wallNanos converts a monotonic-clock instant to wall-clock Unix nanoseconds.
func wallNanos(t time.Time) int64 {
	now := time.Now()
	return now.Add(t.Sub(now)).UnixNano()
}

// ---------------------------------------------------------------------------
// Processes started by the parent.

// tortureNode is one durable redis-server process of the run.
type tortureNode struct {
	idx int
	*redisproc.Process
}

// signal sends sig to the node's process group.
func (n *tortureNode) signal(sig syscall.Signal) error {
	if err := n.Signal(sig); err != nil {
		return fmt.Errorf("node %d: %w", n.idx, err)
	}
	return nil
}

// startTortureNodes starts count durable redis-servers (appendonly,
// appendfsync always) on free loopback ports, each in dir/node<i>. It
// returns every node it started, also on error, so the caller kills them.
func startTortureNodes(bin, dir string, count int) ([]*tortureNode, error) {
	procs := make([]*redisproc.Process, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			procs[i], errs[i] = redisproc.Start(redisproc.Config{
				Bin:     bin,
				Dir:     filepath.Join(dir, "node"+strconv.Itoa(i)),
				Durable: true,
			})
		})
	}
	wg.Wait()
	var nodes []*tortureNode
	for i, p := range procs {
		if p != nil {
			nodes = append(nodes, &tortureNode{idx: i, Process: p})
		}
	}
	return nodes, errors.Join(errs...)
}

// ---------------------------------------------------------------------------
// Fault schedule.

type faultEvent struct {
	AtMillis  int64  `json:"at_ms"` // since the start of the run
	Node      int    `json:"node"`
	Kind      string `json:"kind"`   // pause, kill, delay
	ForMillis int64  `json:"for_ms"` // pause or delay length; for kill, the delay before the restart
	Err       string `json:"error,omitempty"`
}

type faultLog struct {
	mu     sync.Mutex
	events []faultEvent
}

func (l *faultLog) add(e faultEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *faultLog) counts() (m map[string]int, errs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m = map[string]int{}
	for _, e := range l.events {
		m[e.Kind]++
		if e.Err != "" {
			errs = append(errs, fmt.Sprintf("%s node %d at %dms: %s", e.Kind, e.Node, e.AtMillis, e.Err))
		}
	}
	return m, errs
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// runFaultLane injects faults, one at a time, on its own nodes. There are
// (N-1)/2 lanes with disjoint node sets, so at most a minority of the nodes
// is ever paused, slowed or down. The sequence of (gap, node, kind, length)
// depends only on the seed and the lane. No fault starts after until.
func runFaultLane(ctx context.Context, lane int, nodes []*tortureNode, seed uint64, ttl time.Duration, start, until time.Time, log *faultLog) {
	r := rand.New(rand.NewPCG(seed, 0xfa17<<8|uint64(lane)))
	for {
		gap := 200*time.Millisecond + time.Duration(r.Int64N(int64(1300*time.Millisecond)))
		if !sleepCtx(ctx, gap) || time.Now().After(until) {
			return
		}
		n := nodes[r.IntN(len(nodes))]
		ev := faultEvent{AtMillis: time.Since(start).Milliseconds(), Node: n.idx}
		switch k := r.IntN(10); {
		case k < 4: // pause: SIGSTOP for 0.5–2 s
			d := 500*time.Millisecond + time.Duration(r.Int64N(int64(1500*time.Millisecond)))
			ev.Kind, ev.ForMillis = "pause", d.Milliseconds()
			if err := n.signal(syscall.SIGSTOP); err != nil {
				ev.Err = err.Error()
			}
			sleepCtx(ctx, d)
			_ = n.signal(syscall.SIGCONT)
		case k < 6: // kill -9, restart on the same port after more than the TTL
			d := ttl + 100*time.Millisecond + time.Duration(r.Int64N(int64(900*time.Millisecond)))
			ev.Kind, ev.ForMillis = "kill", d.Milliseconds()
			n.Kill()
			if !sleepCtx(ctx, d) {
				log.add(ev)
				return
			}
			var err error
			for attempt := range 5 {
				if attempt > 0 && !sleepCtx(ctx, 200*time.Millisecond) {
					break
				}
				if err = n.Restart(false); err == nil {
					break
				}
			}
			if err != nil {
				// The node stays down: this lane's share of the minority
				// is used up, so the lane injects nothing more.
				ev.Err = "restart failed: " + err.Error()
				log.add(ev)
				return
			}
		default: // an injected delay: a brief pause of 20–200 ms
			d := 20*time.Millisecond + time.Duration(r.Int64N(int64(180*time.Millisecond)))
			ev.Kind, ev.ForMillis = "delay", d.Milliseconds()
			if err := n.signal(syscall.SIGSTOP); err != nil {
				ev.Err = err.Error()
			}
			sleepCtx(ctx, d)
			_ = n.signal(syscall.SIGCONT)
		}
		log.add(ev)
	}
}

// ---------------------------------------------------------------------------
// Parent.

// collector gathers the workers' JSON lines.
type collector struct {
	mu      sync.Mutex
	recs    []csRecord
	ends    map[int]workerEnd
	readyCh chan int
	garbage []string
}

func (c *collector) line(worker int, b []byte) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		c.mu.Lock()
		if len(c.garbage) < 5 {
			c.garbage = append(c.garbage, fmt.Sprintf("worker %d: %q", worker, b))
		}
		c.mu.Unlock()
		return
	}
	switch head.Type {
	case "cs":
		var r csRecord
		if json.Unmarshal(b, &r) == nil {
			r.Worker = worker
			c.mu.Lock()
			c.recs = append(c.recs, r)
			c.mu.Unlock()
		}
	case "end":
		var e workerEnd
		if json.Unmarshal(b, &e) == nil {
			e.Worker = worker
			c.mu.Lock()
			c.ends[worker] = e
			c.mu.Unlock()
		}
	case "ready":
		c.readyCh <- worker
	}
}

func (c *collector) ended(worker int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.ends[worker]
	return ok
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

// lineSink splits a worker's stdout into lines for the collector.
type lineSink struct {
	c      *collector
	worker int
	buf    []byte
}

func (s *lineSink) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.c.line(s.worker, s.buf[:i])
		s.buf = s.buf[i+1:]
	}
	s.buf = append([]byte(nil), s.buf...)
	return len(p), nil
}

// tailBuffer keeps the last few KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-4096:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ReplaceAll(strings.TrimSpace(string(t.buf)), "\n", " | ")
}

type tortureProc struct {
	id     int
	cmd    *exec.Cmd
	done   <-chan struct{}
	stderr *tailBuffer
}

func (p *tortureProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *tortureProc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// dataRoot is where the nodes keep their AOF: /dev/shm when it is a
// writable tmpfs, so that fsync stalls of a shared disk (which hit every
// node at once, a majority fault the schedule never intends) stay out of
// the run; a kill -9 of a node still keeps its data there. Else the
// system's temporary directory.
func dataRoot() string {
	const shm = "/dev/shm"
	if st, err := os.Stat(shm); err == nil && st.IsDir() {
		if f, err := os.CreateTemp(shm, "redlock-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return shm
		}
	}
	return os.TempDir()
}

func runTorture(ctx context.Context, cfg tortureConfig, stdout, stderr io.Writer) error {
	bin, ok := redisproc.Binary()
	if !ok {
		return errors.New("redis-server not found in PATH (or $" + redisproc.ServerEnv + "): torture starts its own nodes (install it, e.g. apt-get install redis-server)")
	}
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	dir, err := os.MkdirTemp(dataRoot(), "redlock-torture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	report := stdout
	if cfg.json {
		report = stderr
	}

	nodes, err := startTortureNodes(bin, dir, cfg.nodes)
	defer func() {
		for _, n := range nodes {
			n.Kill()
		}
	}()
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	minority := (cfg.nodes - 1) / 2
	fmt.Fprintf(report, "redlock torture: %d redis-server nodes (%s; AOF in %s), %d worker processes, ttl %s, %s, seed %d\n",
		cfg.nodes, strings.Join(addrs, " "), dir, cfg.procs, cfg.ttl, cfg.duration, cfg.seed)
	if minority == 0 {
		fmt.Fprintf(report, "note: %d node(s) leave no minority to fault; no faults are injected\n", cfg.nodes)
	}

	col := &collector{ends: map[int]workerEnd{}, readyCh: make(chan int, cfg.procs)}
	var procs []*tortureProc
	defer func() {
		for _, p := range procs { // only what is still running, by PID
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	}()
	for i := range cfg.procs {
		id := i + 1
		cmd := exec.Command(self, "torture", "--worker", "--id", strconv.Itoa(id),
			"--nodes", strings.Join(addrs, ","), "--ttl", cfg.ttl.String(),
			"--duration", cfg.duration.String(), "--seed", strconv.FormatUint(cfg.seed, 10))
		p := &tortureProc{id: id, cmd: cmd, stderr: &tailBuffer{}}
		cmd.Stdout = &lineSink{c: col, worker: id}
		cmd.Stderr = p.stderr
		cmd.Env = append(os.Environ(), "REDLOCK_NODES=")
		if p.done, err = redisproc.StartChild(cmd); err != nil {
			return fmt.Errorf("start worker %d: %w", id, err)
		}
		procs = append(procs, p)
	}

	// Wait until every worker has its coordinators.
	interrupted := false
	readyT := time.NewTimer(60 * time.Second)
	for ready := 0; ready < cfg.procs; {
		select {
		case <-col.readyCh:
			ready++
			continue
		case <-ctx.Done():
			interrupted = true
		case <-readyT.C:
		case <-time.After(100 * time.Millisecond):
			if !slices.ContainsFunc(procs, (*tortureProc).exited) {
				continue
			}
		}
		break
	}
	readyT.Stop()

	start := time.Now()
	until := start.Add(cfg.duration)
	flog := &faultLog{}
	fctx, stopFaults := context.WithCancel(ctx)
	var lanes sync.WaitGroup
	for lane := range minority {
		var mine []*tortureNode
		for i, n := range nodes {
			if i%minority == lane {
				mine = append(mine, n)
			}
		}
		lanes.Go(func() { runFaultLane(fctx, lane, mine, cfg.seed, cfg.ttl, start, until, flog) })
	}

	// Wait for the workers: they stop by themselves after --duration.
	hard := time.NewTimer(cfg.duration + 4*cfg.ttl + 60*time.Second)
	tick := time.NewTicker(10 * time.Second)
	allDone := make(chan struct{})
	go func() {
		for _, p := range procs {
			<-p.done
		}
		close(allDone)
	}()
	killed := false
wait:
	for {
		select {
		case <-allDone:
			break wait
		case <-tick.C:
			m, _ := flog.counts()
			fmt.Fprintf(stderr, "torture %5.0fs: %d critical sections; faults: %d pauses, %d kills, %d delays\n",
				time.Since(start).Seconds(), col.count(), m["pause"], m["kill"], m["delay"])
		case <-ctx.Done(): // Ctrl-C: the workers stop, release and report
			interrupted = true
			for _, p := range procs {
				p.signal(syscall.SIGTERM)
			}
			hard.Reset(15 * time.Second)
			ctx = context.Background() // this case once
		case <-hard.C:
			killed = true
			for _, p := range procs {
				p.signal(syscall.SIGKILL)
			}
			<-allDone
			break wait
		}
	}
	hard.Stop()
	tick.Stop()
	stopFaults()
	lanes.Wait()
	for _, n := range nodes {
		n.Kill()
	}

	sum := analyzeTorture(cfg, col, flog)
	for _, p := range procs {
		st := p.cmd.ProcessState
		if st != nil && !st.Success() {
			sum.WorkerFailures = append(sum.WorkerFailures, fmt.Sprintf("worker %d: %s: %s", p.id, st, p.stderr.String()))
		} else if !col.ended(p.id) {
			sum.WorkerFailures = append(sum.WorkerFailures, fmt.Sprintf("worker %d: no end report: %s", p.id, p.stderr.String()))
		}
	}
	if killed {
		sum.WorkerFailures = append(sum.WorkerFailures, "workers did not stop in time and were killed")
	}
	sum.Interrupted = interrupted
	sum.Pass = sum.Violations == 0 && sum.FenceRegressions == 0 && len(sum.LateLosses) == 0 &&
		len(sum.WorkerFailures) == 0 && len(sum.Starved) == 0 && sum.Acquisitions > 0 && !interrupted
	printTortureTable(report, sum)
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return err
		}
	}
	switch {
	case interrupted:
		return &codeError{code: 130, err: errors.New("interrupted (the summary above is partial)")}
	case !sum.Pass:
		return fmt.Errorf("FAIL: %d violations, %d fence regressions, %d of %d losses signalled late, %d primitives starved, %d worker failures",
			sum.Violations, sum.FenceRegressions, len(sum.LateLosses), sum.Losses, len(sum.Starved), len(sum.WorkerFailures))
	}
	return nil
}

// ---------------------------------------------------------------------------
// Analysis.

type tortureRow struct {
	Primitive    string  `json:"primitive"`
	Kind         string  `json:"kind"`
	Acquisitions int     `json:"acquisitions"`
	P50Millis    float64 `json:"acquire_p50_ms"`
	P99Millis    float64 `json:"acquire_p99_ms"`
	Renewed      int     `json:"held_past_ttl"` // held longer than the TTL without loss
	Lost         int     `json:"lost"`
	Signalled    int     `json:"lost_signalled"`
}

type tortureSummary struct {
	Nodes              int          `json:"nodes"`
	Procs              int          `json:"procs"`
	TTL                string       `json:"ttl"`
	Duration           string       `json:"duration"`
	Seed               uint64       `json:"seed"`
	Acquisitions       int          `json:"acquisitions"`
	Rows               []tortureRow `json:"primitives"`
	AcquireP50Millis   float64      `json:"acquire_p50_ms"`
	AcquireP99Millis   float64      `json:"acquire_p99_ms"`
	Violations         int          `json:"violations"`
	ViolationExamples  []string     `json:"violation_examples,omitempty"`
	FenceRegressions   int          `json:"fence_regressions"`
	RegressionExamples []string     `json:"fence_regression_examples,omitempty"`
	Losses             int          `json:"losses"`
	// LossesSignalled counts losses whose Lost() was seen by the deadline + 5 ms.
	LossesSignalled    int     `json:"losses_signalled"`
	LossesSignalledPct float64 `json:"losses_signalled_pct"`
	// LossesLateStalled counts losses seen later than that, but no later
	// than the time the worker process itself could not run (its probe
	// timer overslept by as much): the machine, not the lease, was late.
	LossesLateStalled               int      `json:"losses_late_worker_stalled"`
	LossesSignalledAllowingStallPct float64  `json:"losses_signalled_allowing_stall_pct"`
	LateLossExamples                []string `json:"late_loss_stalled_examples,omitempty"`
	// LateLosses lists every loss signalled late with no such excuse.
	LateLosses          []string `json:"late_losses,omitempty"`
	SemaphoreMaxHolders int      `json:"semaphore_max_holders,omitempty"`
	// Starved lists primitives whose workers never got a critical section.
	Starved             []string       `json:"starved,omitempty"`
	Faults              map[string]int `json:"faults"`
	FaultErrors         []string       `json:"fault_errors,omitempty"`
	FaultLog            []faultEvent   `json:"fault_log"`
	AcquireErrors       int            `json:"acquire_errors"`
	AcquireErrorSamples []string       `json:"acquire_error_samples,omitempty"`
	ReleaseErrors       int            `json:"release_errors"`
	InvalidOnArrival    int            `json:"invalid_on_arrival"`
	Workers             []workerEnd    `json:"workers"`
	WorkerFailures      []string       `json:"worker_failures,omitempty"`
	Garbage             []string       `json:"unparsed_lines,omitempty"`
	Interrupted         bool           `json:"interrupted"`
	Pass                bool           `json:"pass"`
}

func percentile(sorted []int64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[(len(sorted)-1)*p/100]) / 1e6
}

func describe(r *csRecord) string {
	return fmt.Sprintf("w%d %s %s %s fence %d [%s .. %s]", r.Worker, r.Primitive, r.Kind, r.Resource, r.Fence,
		time.Unix(0, r.Enter).Format("15:04:05.000000"), time.Unix(0, r.end()).Format("15:04:05.000000"))
}

// resourceKeys returns the keys under which r is checked: the Lock names of
// a Lock or MultiLock (they share keys and fences), else the primitive's
// resource.
func resourceKeys(r *csRecord) []string {
	switch r.Primitive {
	case "lock", "multilock":
		keys := make([]string, len(r.Names))
		for i, n := range r.Names {
			keys[i] = "lock:" + n
		}
		return keys
	}
	return []string{r.Primitive + ":" + r.Resource}
}

func analyzeTorture(cfg tortureConfig, col *collector, flog *faultLog) *tortureSummary {
	col.mu.Lock()
	recs := slices.Clone(col.recs)
	ends := make([]workerEnd, 0, len(col.ends))
	for _, e := range col.ends {
		ends = append(ends, e)
	}
	garbage := slices.Clone(col.garbage)
	col.mu.Unlock()
	slices.SortFunc(ends, func(a, b workerEnd) int { return a.Worker - b.Worker })

	s := &tortureSummary{
		Nodes: cfg.nodes, Procs: cfg.procs, TTL: cfg.ttl.String(), Duration: cfg.duration.String(), Seed: cfg.seed,
		Acquisitions: len(recs), Workers: ends, Garbage: garbage,
	}
	s.Faults, s.FaultErrors = flog.counts()
	flog.mu.Lock()
	s.FaultLog = slices.Clone(flog.events)
	flog.mu.Unlock()
	for _, e := range ends {
		for _, n := range e.AcquireErrors {
			s.AcquireErrors += n
		}
		s.AcquireErrorSamples = append(s.AcquireErrorSamples, e.FirstErrors...)
		s.ReleaseErrors += e.ReleaseErrors
		s.InvalidOnArrival += e.InvalidOnArrival
	}

	// Rows per primitive and kind; latencies; losses.
	type rowKey struct{ prim, kind string }
	rows := map[rowKey]*tortureRow{}
	lat := map[rowKey][]int64{}
	var all []int64
	for i := range recs {
		r := &recs[i]
		k := rowKey{r.Primitive, r.Kind}
		row := rows[k]
		if row == nil {
			row = &tortureRow{Primitive: r.Primitive, Kind: r.Kind}
			rows[k] = row
		}
		row.Acquisitions++
		if !r.Downgrade {
			lat[k] = append(lat[k], r.AcquireNanos)
			all = append(all, r.AcquireNanos)
		}
		if r.Lost {
			row.Lost++
			s.Losses++
			switch {
			case r.LostAt > 0 && r.LostAt <= r.FinalDeadline+int64(tortureLostSlack):
				row.Signalled++
				s.LossesSignalled++
			case r.LostAt > 0 && r.LostAt <= r.FinalDeadline+int64(tortureLostSlack)+r.WorkerStall:
				row.Signalled++
				s.LossesLateStalled++
				if len(s.LateLossExamples) < 5 {
					s.LateLossExamples = append(s.LateLossExamples, fmt.Sprintf("%s: Lost() seen %s after the deadline while the worker process itself could not run for %s",
						describe(r), time.Duration(r.LostAt-r.FinalDeadline).Round(time.Microsecond), time.Duration(r.WorkerStall).Round(time.Microsecond)))
				}
			default:
				late := "never"
				if r.LostAt > 0 {
					late = time.Duration(r.LostAt-r.FinalDeadline).Round(time.Microsecond).String() + " after the deadline"
				}
				s.LateLosses = append(s.LateLosses, fmt.Sprintf("%s: Lost() seen %s (worker stall %s)", describe(r), late, time.Duration(r.WorkerStall).Round(time.Microsecond)))
			}
		} else if time.Duration(r.Exit-r.Enter) > cfg.ttl {
			row.Renewed++
		}
	}
	calls := map[string]int{}
	for _, e := range ends {
		for p, n := range e.Attempts {
			calls[p] += n
		}
	}
	for p, n := range calls {
		if !slices.ContainsFunc(recs, func(r csRecord) bool { return r.Primitive == p }) {
			s.Starved = append(s.Starved, fmt.Sprintf("%s: %d Acquire calls, no critical section", p, n))
		}
	}
	slices.Sort(s.Starved)
	for k, row := range rows {
		l := lat[k]
		slices.Sort(l)
		row.P50Millis, row.P99Millis = percentile(l, 50), percentile(l, 99)
		s.Rows = append(s.Rows, *row)
	}
	order := map[string]int{"lock": 0, "multilock": 1, "rwlock": 2, "fairlock": 3, "semaphore": 4}
	slices.SortFunc(s.Rows, func(a, b tortureRow) int {
		if d := order[a.Primitive] - order[b.Primitive]; d != 0 {
			return d
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	slices.Sort(all)
	s.AcquireP50Millis, s.AcquireP99Millis = percentile(all, 50), percentile(all, 99)
	s.LossesSignalledPct, s.LossesSignalledAllowingStallPct = 100, 100
	if s.Losses > 0 {
		s.LossesSignalledPct = 100 * float64(s.LossesSignalled) / float64(s.Losses)
		s.LossesSignalledAllowingStallPct = 100 * float64(s.LossesSignalled+s.LossesLateStalled) / float64(s.Losses)
	}

	// Group the intervals by resource key, in enter order.
	byKey := map[string][]int{}
	for i := range recs {
		for _, k := range resourceKeys(&recs[i]) {
			byKey[k] = append(byKey[k], i)
		}
	}
	type pair struct{ a, b int }
	seen := map[pair]bool{}
	violation := func(i, j int, what string) {
		p := pair{min(i, j), max(i, j)}
		if seen[p] {
			return
		}
		seen[p] = true
		s.Violations++
		if len(s.ViolationExamples) < 5 {
			s.ViolationExamples = append(s.ViolationExamples, what+": "+describe(&recs[i])+" overlaps "+describe(&recs[j]))
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		idx := byKey[k]
		slices.SortFunc(idx, func(a, b int) int {
			switch {
			case recs[a].Enter < recs[b].Enter:
				return -1
			case recs[a].Enter > recs[b].Enter:
				return 1
			}
			return 0
		})
		// Overlaps: an interval of an exclusive holder (Lock, MultiLock,
		// FairLock, RWLock writer) must not overlap any other interval on
		// the same key; readers may overlap readers.
		for x, i := range idx {
			for _, j := range idx[x+1:] {
				if recs[j].Enter >= recs[i].end() {
					break
				}
				if recs[i].Kind == "permit" || recs[j].Kind == "permit" {
					continue
				}
				if recs[i].exclusive() || recs[j].exclusive() {
					violation(i, j, k)
				}
			}
		}
		// Semaphores: at most Permits holders at any instant.
		if len(idx) > 0 && recs[idx[0]].Kind == "permit" {
			type ev struct {
				at    int64
				delta int
				i     int
			}
			var evs []ev
			for _, i := range idx {
				evs = append(evs, ev{recs[i].Enter, 1, i}, ev{recs[i].end(), -1, i})
			}
			slices.SortFunc(evs, func(a, b ev) int {
				if a.at != b.at {
					if a.at < b.at {
						return -1
					}
					return 1
				}
				return a.delta - b.delta // exits first
			})
			var active []int
			for _, e := range evs {
				if e.delta < 0 {
					active = slices.DeleteFunc(active, func(v int) bool { return v == e.i })
					continue
				}
				if len(active) >= recs[e.i].Permits && len(active) > 0 {
					violation(active[0], e.i, k+fmt.Sprintf(" (more than %d permits)", recs[e.i].Permits))
				}
				active = append(active, e.i)
				s.SemaphoreMaxHolders = max(s.SemaphoreMaxHolders, len(active))
			}
		}
		// Fences: strictly increasing over successive exclusive holders.
		var maxFence uint64
		var maxAt = -1
		for _, i := range idx {
			if !recs[i].exclusive() {
				continue
			}
			if maxAt >= 0 && recs[i].Fence <= maxFence {
				s.FenceRegressions++
				if len(s.RegressionExamples) < 5 {
					s.RegressionExamples = append(s.RegressionExamples, k+": "+describe(&recs[i])+" after "+describe(&recs[maxAt]))
				}
			}
			if recs[i].Fence > maxFence || maxAt < 0 {
				maxFence, maxAt = recs[i].Fence, i
			}
		}
	}
	return s
}

func printTortureTable(out io.Writer, s *tortureSummary) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "primitive\tkind\tacquisitions\tp50 acquire\tp99 acquire\theld past ttl\tlost\tsignalled\t")
	ms := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "ms" }
	for _, r := range s.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t\n", r.Primitive, r.Kind, r.Acquisitions, ms(r.P50Millis), ms(r.P99Millis), r.Renewed, r.Lost, r.Signalled)
	}
	fmt.Fprintf(tw, "all\t\t%d\t%s\t%s\t\t%d\t%d\t\n", s.Acquisitions, ms(s.AcquireP50Millis), ms(s.AcquireP99Millis), s.Losses, s.LossesSignalled)
	tw.Flush()
	fmt.Fprintln(out)
	fmt.Fprintf(out, "faults           %d pauses, %d kill -9 + restarts, %d delays", s.Faults["pause"], s.Faults["kill"], s.Faults["delay"])
	if len(s.FaultErrors) > 0 {
		fmt.Fprintf(out, " (%d failed: %s)", len(s.FaultErrors), strings.Join(s.FaultErrors, "; "))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "acquisitions %d\n", s.Acquisitions)
	fmt.Fprintf(out, "violations %d\n", s.Violations)
	for _, v := range s.ViolationExamples {
		fmt.Fprintf(out, "  %s\n", v)
	}
	fmt.Fprintf(out, "fence regressions %d\n", s.FenceRegressions)
	for _, v := range s.RegressionExamples {
		fmt.Fprintf(out, "  %s\n", v)
	}
	fmt.Fprintf(out, "losses signalled by the deadline (+%s) %d/%d (%.1f%%)\n", tortureLostSlack, s.LossesSignalled, s.Losses, s.LossesSignalledPct)
	if s.LossesLateStalled > 0 {
		fmt.Fprintf(out, "  + %d seen late only while the worker process itself could not run: %d/%d (%.1f%%) allowing for that\n",
			s.LossesLateStalled, s.LossesSignalled+s.LossesLateStalled, s.Losses, s.LossesSignalledAllowingStallPct)
		for _, v := range s.LateLossExamples {
			fmt.Fprintf(out, "    %s\n", v)
		}
	}
	for _, v := range s.LateLosses {
		fmt.Fprintf(out, "  LATE %s\n", v)
	}
	if s.SemaphoreMaxHolders > 0 {
		fmt.Fprintf(out, "semaphore max holders %d of %d permits\n", s.SemaphoreMaxHolders, tortureSemPermits)
	}
	for _, v := range s.Starved {
		fmt.Fprintf(out, "STARVED %s\n", v)
	}
	fmt.Fprintf(out, "acquire errors %d, release errors %d, invalid on arrival %d\n", s.AcquireErrors, s.ReleaseErrors, s.InvalidOnArrival)
	for _, v := range s.AcquireErrorSamples {
		fmt.Fprintf(out, "  %s\n", v)
	}
	var g []string
	for _, e := range s.Workers {
		g = append(g, fmt.Sprintf("w%d %d (baseline %d, leaked %d)", e.Worker, e.Goroutines, e.Baseline, e.Leaked))
	}
	fmt.Fprintf(out, "goroutines after close  %s\n", strings.Join(g, ", "))
	for _, f := range s.WorkerFailures {
		fmt.Fprintf(out, "  %s\n", f)
	}
	for _, f := range s.Garbage {
		fmt.Fprintf(out, "  unparsed %s\n", f)
	}
	switch {
	case s.Interrupted:
		fmt.Fprintln(out, "INTERRUPTED")
	case s.Pass:
		fmt.Fprintln(out, "PASS")
	default:
		fmt.Fprintln(out, "FAIL")
	}
}
