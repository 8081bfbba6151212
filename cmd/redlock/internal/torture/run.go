package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// Run is the parent of a soak. It starts the nodes and cfg.Procs worker
// processes: self, the running binary, as `self torture --worker ...`. It
// injects the faults and prints the summary on stdout. With cfg.JSON the
// summary goes to stdout as JSON and the text to stderr. Run returns nil
// only if the run passed, and [ErrInterrupted] when ctx ended first.
func Run(ctx context.Context, cfg Config, self string, stdout, stderr io.Writer) error {
	bin, ok := redisproc.Binary()
	if !ok {
		return errors.New("redis-server not found in PATH (or $" + redisproc.ServerEnv + "): torture starts its own nodes (install it, e.g. apt-get install redis-server)")
	}
	dir, err := os.MkdirTemp(dataRoot(), "redlock-torture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	report := stdout
	if cfg.JSON {
		report = stderr
	}

	kinds := cfg.Faults
	if kinds == nil {
		kinds = FaultKinds
	}
	clockOff := ""
	if slices.Contains(kinds, "clock") {
		if _, err := redisproc.ClockShim(); err != nil {
			clockOff = firstLine(err.Error())
			kinds = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == "clock" })
		} else {
			defer redisproc.RemoveClockShim()
		}
	}

	nodes, err := startNodes(bin, dir, cfg.Nodes, slices.Contains(kinds, "clock"))
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
	minority := (cfg.Nodes - 1) / 2
	fmt.Fprintf(report, "redlock torture: %d redis-server nodes (%s; AOF in %s), %d worker processes, ttl %s, %s, seed %d\n",
		cfg.Nodes, strings.Join(addrs, " "), dir, cfg.Procs, cfg.TTL, cfg.Duration, cfg.Seed)
	if minority == 0 {
		fmt.Fprintf(report, "note: %d node(s) leave no minority to fault; no faults are injected\n", cfg.Nodes)
	}
	if clockOff != "" {
		fmt.Fprintf(report, "note: clock-step faults are off: %s (they need a C compiler, cc or $CC, to build the clock shim)\n", clockOff)
	}
	fmt.Fprintf(report, "faults: %s\n", describeKinds(kinds))

	col := newCollector(cfg.Procs)
	var procs []*proc
	defer func() {
		for _, p := range procs { // only what is still running, by PID
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	}()
	for i := range cfg.Procs {
		id := i + 1
		cmd := exec.Command(self, append([]string{"torture", "--worker"}, workerArgs(id, addrs, cfg)...)...)
		p := &proc{id: id, cmd: cmd, stderr: &tailBuffer{}}
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
	for ready := 0; ready < cfg.Procs; {
		select {
		case <-col.readyCh:
			ready++
			continue
		case <-ctx.Done():
			interrupted = true
		case <-readyT.C:
		case <-time.After(100 * time.Millisecond):
			if !slices.ContainsFunc(procs, (*proc).exited) {
				continue
			}
		}
		break
	}
	readyT.Stop()

	start := time.Now()
	until := start.Add(cfg.Duration)
	flog := &faultLog{}
	fctx, stopFaults := context.WithCancel(ctx)
	var lanes sync.WaitGroup
	for lane := range minority {
		var mine []*node
		for i, n := range nodes {
			if i%minority == lane {
				mine = append(mine, n)
			}
		}
		lanes.Go(func() { runFaultLane(fctx, lane, mine, kinds, cfg.Seed, cfg.TTL, start, until, flog) })
	}

	// Wait for the workers: they stop by themselves after the duration.
	hard := time.NewTimer(cfg.Duration + 4*cfg.TTL + 60*time.Second)
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
			m, _ := faultCounts(flog.snapshot())
			fmt.Fprintf(stderr, "torture %5.0fs: %d critical sections; faults: %d pauses, %d kills, %d empty restarts, %d delays, %d evictions, %d clock steps forward, %d back\n",
				time.Since(start).Seconds(), col.count(), m["pause"], m["kill"], m["empty"], m["delay"], m["evict"], m["clock+"], m["clock-"])
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

	sum := summarize(cfg, col.snapshot(), flog.snapshot())
	sum.FaultKinds, sum.ClockFaultsOff = kinds, clockOff
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
	sum.Pass = sum.passed()
	printTable(report, sum)
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return err
		}
	}
	switch {
	case interrupted:
		return ErrInterrupted
	case !sum.Pass:
		return fmt.Errorf("FAIL: %d violations, %d fence regressions, %d of %d losses signalled late, %d primitives starved, %d worker failures, %d unparsed lines",
			sum.Violations, sum.FenceRegressions, len(sum.LateLosses), sum.Losses, len(sum.Starved), len(sum.WorkerFailures), len(sum.Garbage))
	}
	return nil
}

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// describeKinds names the fault kinds of a run for its header line.
func describeKinds(kinds []string) string {
	if len(kinds) == 0 {
		return "none"
	}
	return strings.Join(kinds, ", ")
}
