package torture

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// workerArgs are the arguments the parent re-executes itself with (after
// `torture --worker`); [RunWorker] parses them.
func workerArgs(id int, addrs []string, cfg Config) []string {
	return []string{"--id", strconv.Itoa(id),
		"--nodes", strings.Join(addrs, ","), "--ttl", cfg.TTL.String(),
		"--duration", cfg.Duration.String(), "--seed", strconv.FormatUint(cfg.Seed, 10),
		"--procs", strconv.Itoa(cfg.Procs)}
}

// worker is one worker process: its loops share the output and the counts
// reported in its last line.
type worker struct {
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

func (w *worker) emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	w.outMu.Lock()
	defer w.outMu.Unlock()
	_, _ = w.out.Write(append(b, '\n'))
}

func (w *worker) acquireError(prim string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.acqErrs[prim]++
	if len(w.firstErrs) < 5 {
		w.firstErrs = append(w.firstErrs, prim+": "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
}

// RunWorker is the worker mode (`redlock torture --worker ARGS`). It runs
// the primitives' loops against the nodes named in args until the duration
// in args has passed. It prints a JSON line per critical section on
// stdout, and a last line with its counts. Bad args return a [*UsageError].
func RunWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	baseline := runtime.NumGoroutine()
	fs := flag.NewFlagSet("torture --worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.Int("id", 0, "worker id")
	nodesFlag := fs.String("nodes", "", "node addresses")
	ttl := fs.Duration("ttl", time.Second, "lease TTL")
	duration := fs.Duration("duration", 10*time.Second, "run time")
	seed := fs.Uint64("seed", 1, "seed")
	procs := fs.Int("procs", 1, "worker processes of the run (the latch count is procs+1)")
	if err := fs.Parse(args); err != nil {
		return &UsageError{err}
	}
	var nodes []string
	for _, s := range strings.Split(*nodesFlag, ",") {
		if s = strings.TrimSpace(s); s != "" {
			nodes = append(nodes, s)
		}
	}
	if len(nodes) == 0 {
		return &UsageError{errors.New("worker: no nodes")}
	}
	if *procs < 1 {
		return &UsageError{errors.New("worker: --procs must be at least 1")}
	}
	w := &worker{id: *id, ttl: *ttl, out: stdout, acqErrs: map[string]int{}, attempts: map[string]int{}}

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
	// One Coordinator per primitive: lock, multilock, rwlock, fairlock,
	// semaphore, latch.
	var cs [6]*coordinator.Coordinator
	for i := range cs {
		c, err := newCoord()
		if err != nil {
			return err
		}
		cs[i] = c
	}
	var names []string
	for i := range lockNames {
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
	latchCount := *procs + 1
	for k := range 3 {
		r := rng(uint64(60 + k))
		wg.Go(func() { w.latchCounter(runCtx, r, cs[5], latchCount, k) })
	}
	wg.Go(func() { w.latchWaiter(runCtx, cs[5], latchCount) })
	{
		r := rng(70)
		wg.Go(func() { w.latchReader(runCtx, r, cs[5], latchCount) })
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
	end := WorkerEnd{
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

// plan picks a hold, mostly 1–30 ms. With probability long it is longer
// than the TTL, so that renewals must succeed through the faults. With
// probability expire it is a lease without auto-renewal, held until it is
// lost, so that losses are measured.
func (w *worker) plan(r *rand.Rand, long, expire float64) holdPlan {
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
func (w *worker) acquire(ctx context.Context, prim string, l primitives.Locker) (*primitives.Lease, time.Duration) {
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
func (w *worker) critical(ctx context.Context, s holdSpec, lease *primitives.Lease, acq time.Duration, work time.Duration, downgrade bool) bool {
	if !lease.Valid() {
		w.invalid.Add(1)
		return false
	}
	enter := time.Now()
	rec := Hold{
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
		if rec.LostAt > rec.FinalDeadline+int64(LostSlack) {
			// Late: was this process itself unable to run meanwhile? The
			// probe that overslept wakes at about the same time as we did.
			time.Sleep(25 * time.Millisecond)
			rec.WorkerStall = int64(w.lag.maxLag(rec.FinalDeadline, rec.LostAt+int64(25*time.Millisecond)))
		}
	}
	w.emit(rec)
	return true
}

func (w *worker) release(lease *primitives.Lease) {
	if err := lease.Release(context.Background()); err != nil && !errors.Is(err, primitives.ErrLeaseLost) {
		if w.releaseErrors.Add(1) <= 3 {
			w.mu.Lock()
			w.firstErrs = append(w.firstErrs, "release: "+strings.ReplaceAll(err.Error(), "\n", "; "))
			w.mu.Unlock()
		}
	}
}

// hold acquires l, runs one critical section of plan p and releases.
func (w *worker) hold(ctx context.Context, s holdSpec, l primitives.Locker, p holdPlan) {
	lease, acq := w.acquire(ctx, s.prim, l)
	if lease == nil {
		return
	}
	w.critical(ctx, s, lease, acq, p.work, false)
	w.release(lease)
}

func (w *worker) lockLoop(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator, names []string) {
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

func (w *worker) multiLoop(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator, names []string) {
	type set struct {
		names              []string
		renewing, expiring *primitives.MultiLock
	}
	var sets []set
	for i := range names {
		var s set
		for k := range multiSize {
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

func (w *worker) readLoop(ctx context.Context, r *rand.Rand, rw *primitives.RWLock) {
	for ctx.Err() == nil {
		w.hold(ctx, holdSpec{prim: "rwlock", resource: "t-rw", kind: "read", autoRenew: true}, rw.Reader(), w.plan(r, 0.01, 0))
		pause(ctx, r, 20*time.Millisecond)
	}
}

func (w *worker) fairLoop(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator) {
	w.lockerLoop(ctx, r, holdSpec{prim: "fairlock", resource: "t-fair", kind: "exclusive"},
		func(opts ...primitives.Option) (primitives.Locker, error) {
			return primitives.NewFairLock(c, "t-fair", opts...)
		})
}

func (w *worker) semLoop(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator) {
	w.lockerLoop(ctx, r, holdSpec{prim: "semaphore", resource: "t-sem", kind: "permit", permits: semPermits},
		func(opts ...primitives.Option) (primitives.Locker, error) {
			return primitives.NewSemaphore(c, "t-sem", semPermits, opts...)
		})
}

// lockerLoop holds one Locker made by newLocker again and again: with
// auto-renewal, or (plan.expire) without it until the lease is lost.
func (w *worker) lockerLoop(ctx context.Context, r *rand.Rand, spec holdSpec,
	newLocker func(...primitives.Option) (primitives.Locker, error)) {
	renewing, err := newLocker(primitives.WithTTL(w.ttl))
	if err != nil {
		w.acquireError(spec.prim, err)
		return
	}
	expiring, err := newLocker(primitives.WithTTL(w.ttl), primitives.WithAutoRenew(false))
	if err != nil {
		w.acquireError(spec.prim, err)
		return
	}
	for ctx.Err() == nil {
		p := w.plan(r, 0.02, 0.015)
		l := renewing
		if p.expire {
			l = expiring
		}
		spec.autoRenew = !p.expire
		w.hold(ctx, spec, l, p)
		pause(ctx, r, 10*time.Millisecond)
	}
}

// writeLoop takes the writer; one write in five is downgraded to a read
// lease (the write interval ends before Downgrade is called).
func (w *worker) writeLoop(ctx context.Context, r *rand.Rand, rw *primitives.RWLock) {
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
