package benchkit

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Command is a benchmark command line: `redlock bench` (redlock and the
// floor) and the bench module's redlock-bench (the same plus the peers)
// share it.
type Command struct {
	Name      string // for messages: "redlock bench", "redlock-bench"
	Peers     []Impl // other libraries, run after redlock's rows
	PeersNote string // printed under the report's header
}

// UsageError is a bad command line (exit code 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErr(format string, a ...any) error { return &UsageError{fmt.Errorf(format, a...)} }

// Run parses args, runs the benchmark and writes the markdown report to
// stdout (and the files asked for); the live progress line goes to stderr.
// A flag error is a *UsageError (flag.ErrHelp for --help); an interrupted
// run writes what it measured and returns the interruption.
func (c Command) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ids := []string{}
	for _, im := range append(Own(Settings{}), c.Peers...) {
		ids = append(ids, im.ID)
	}
	var wids []string
	for _, w := range Workloads() {
		wids = append(wids, w.ID)
	}
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		nodes    = fs.String("nodes", "", "comma-separated host:port of existing Redis nodes (default: start 3 redis-servers on loopback); the first node is the single-node set")
		embedded = fs.Bool("embedded", false, "use in-process miniredis servers (results not comparable)")
		duration = fs.Duration("duration", 3*time.Second, "measured window per run")
		warmup   = fs.Duration("warmup", time.Second, "warm-up before each measured window")
		repeat   = fs.Int("repeat", 1, "runs per cell; the table shows medians")
		jsonOut  = fs.String("json", "", "write raw results as JSON to this file")
		only     = fs.String("only", "", "comma-separated workloads to run ("+strings.Join(wids, ",")+")")
		impls    = fs.String("impls", "", "comma-separated implementations ("+strings.Join(ids, ",")+")")
		nodeSets = fs.String("nodesets", "", "comma-separated node counts to run (default: all nodes, then 1)")
		mdOut    = fs.String("md", "", "also write the markdown report to this file")
		svgOut   = fs.String("svg", "", "write an SVG chart (largest node set) to this file, e.g. docs/benchmarks.svg")
		luaPath  = fs.String("lua", "", "a lock.lua for the floor (default: the library's own)")
		handoffs = fs.Int("handoffs", 200, "W2: handoffs to measure per run")
		hmax     = fs.Duration("handoff-max", 15*time.Second, "W2: time cap per run (slow pollers may measure fewer handoffs)")
		settle   = fs.Duration("settle", 10*time.Millisecond, "W2: how long the waiter waits before the holder releases; CountDownLatch: the waiters' head start")
		burst    = fs.Int("burst", 0, "instead of the table: hold this many leases (TTL 10s) in one process and release them from --releasers goroutines while their renewals are due; report errors and keys left")
		rels     = fs.Int("releasers", 256, "--burst: goroutines that release")
		aburst   = fs.Int("acquire-burst", 0, "instead of the table: acquire this many free locks (TTL 10s, each Acquire bounded by 10s) from --acquirers goroutines in one process, hold them for --hold; report failed acquires, latency and leases lost")
		acqs     = fs.Int("acquirers", 256, "--acquire-burst: goroutines that acquire")
		hold     = fs.Duration("hold", 15*time.Second, "--acquire-burst: how long the leases are held after the last acquire")
		churn    = fs.Int("churn", 0, "instead of the table: lock and release this many distinct names once each, then report keys and used_memory per node before, right after, and once back at the baseline (helper keys expire: fence counters about 1 min after their last write)")
		churnMax = fs.Duration("churn-wait", 3*time.Minute, "--churn: how long to wait for the baseline")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &UsageError{err}
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments %q", fs.Args())
	}
	o := Options{
		Embedded: *embedded, Warmup: *warmup, Window: *duration, Repeat: *repeat,
		Only: split(*only), Impls: split(*impls),
		Handoffs: *handoffs, HandoffMax: *hmax, Settle: *settle, Progress: stderr,
		Peers: c.Peers, PeersNote: c.PeersNote,
	}
	for _, id := range o.Only {
		if !match(wids, id) {
			return usageErr("unknown workload %q in --only (have %s)", id, strings.Join(wids, ","))
		}
	}
	for _, id := range o.Impls {
		if !match(ids, id) {
			return usageErr("unknown implementation %q in --impls (have %s)", id, strings.Join(ids, ","))
		}
	}
	if *luaPath != "" {
		lua, err := ReadLua(*luaPath)
		if err != nil {
			return usageErr("--lua: %w", err)
		}
		o.Lua = lua
	}
	if *nodes != "" {
		if *embedded {
			return usageErr("--nodes and --embedded exclude each other")
		}
		o.Addrs = split(*nodes)
	}
	for _, s := range split(*nodeSets) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return usageErr("bad --nodesets entry %q", s)
		}
		o.NodeSets = append(o.NodeSets, n)
	}
	if *burst != 0 {
		return c.runBurst(ctx, *burst, *rels, *nodes, *embedded, stdout)
	}
	if *aburst != 0 {
		return c.runAcquireBurst(ctx, AcquireBurstOptions{Locks: *aburst, Acquirers: *acqs, TTL: LockTTL, Hold: *hold}, *nodes, *embedded, stdout)
	}
	if *churn != 0 {
		return c.runChurn(ctx, *churn, *churnMax, *nodes, *embedded, stdout, stderr)
	}
	if *duration <= 0 || *warmup < 0 || *handoffs <= 0 || *hmax <= 0 || *settle <= 0 || *repeat < 1 {
		return usageErr("--duration, --handoffs, --handoff-max, --settle and --repeat must be positive, --warmup not negative")
	}
	rep, err := Run(ctx, o)
	if err != nil && rep == nil {
		return err
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: interrupted: %v (partial results follow)\n", c.Name, err)
	}
	md := rep.Markdown()
	fmt.Fprint(stdout, md)
	var werr error
	if *mdOut != "" {
		werr = errors.Join(werr, writeFile(*mdOut, []byte(md)))
	}
	if *svgOut != "" {
		werr = errors.Join(werr, writeFile(*svgOut, []byte(rep.SVG())))
	}
	if *jsonOut != "" {
		b, jerr := json.MarshalIndent(rep, "", "  ")
		if jerr == nil {
			jerr = writeFile(*jsonOut, append(b, '\n'))
		}
		werr = errors.Join(werr, jerr)
	}
	return errors.Join(err, werr)
}

// nodesOrStart returns the nodes given (comma-separated host:port), or
// the addresses of 3 redis-servers it starts (embedded ones with
// embedded); stop ends what it started.
func nodesOrStart(nodes string, embedded bool) (addrs []string, stop func(), err error) {
	if addrs = split(nodes); len(addrs) > 0 {
		return addrs, func() {}, nil
	}
	start := StartRedisServers
	if embedded {
		start = StartEmbedded
	}
	srv, err := start(3)
	if err != nil {
		return nil, nil, err
	}
	return srv.Addrs, func() { srv.Close() }, nil
}

// runBurst is --burst: ReleaseBurst on the given nodes, or on 3
// redis-servers it starts (embedded ones with --embedded).
func (c Command) runBurst(ctx context.Context, leases, releasers int, nodes string, embedded bool, stdout io.Writer) error {
	if leases < 1 || releasers < 1 {
		return usageErr("--burst and --releasers must be positive")
	}
	addrs, stop, err := nodesOrStart(nodes, embedded)
	if err != nil {
		return err
	}
	defer stop()
	res, err := ReleaseBurst(ctx, BurstOptions{Addrs: addrs, Leases: leases, Releasers: releasers, TTL: LockTTL})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "## Release burst (%d nodes)\n\n%s", len(addrs), res.Markdown())
	if res.Errors > 0 {
		return fmt.Errorf("%s: %d releases failed", c.Name, res.Errors)
	}
	return nil
}

func writeFile(path string, b []byte) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, b, 0o644)
}

func split(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
