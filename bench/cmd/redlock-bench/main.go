// Command redlock-bench runs the redlock benchmark workloads (W1..W5) against
// redlock, a plain-rueidis floor and peer libraries, on 3 nodes and 1 node,
// and prints a markdown table. See bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlock-go/redlock/bench"
)

func main() {
	var (
		nodes    = flag.String("nodes", "", "comma-separated host:port of existing Redis nodes (default: start redis-servers on loopback); the first node is the single-node set")
		embedded = flag.Bool("embedded", false, "use in-process miniredis servers (results NOT comparable)")
		duration = flag.Duration("duration", 3*time.Second, "measured window per run")
		warmup   = flag.Duration("warmup", time.Second, "warm-up before each measured window")
		repeat   = flag.Int("repeat", 1, "runs per cell; the table shows medians")
		jsonOut  = flag.String("json", "", "write raw results as JSON to this file")
		only     = flag.String("only", "", "comma-separated workloads to run (W1,W2,W3,W4,W5)")
		impls    = flag.String("impls", "", "comma-separated implementations (redlock-notify,redlock-polling,floor,redsync,bsm,rueidislock)")
		nodeSets = flag.String("nodesets", "", "comma-separated node counts to run (default: all nodes, then 1)")
		mdOut    = flag.String("md", "", "also write the markdown table to this file")
		luaPath  = flag.String("lua", "", "path of primitives/lock.lua for the floor (default: found from the working directory)")
		handoffs = flag.Int("handoffs", 200, "W2: handoffs to measure per run")
		hmax     = flag.Duration("handoff-max", 15*time.Second, "W2: time cap per run (slow pollers may measure fewer handoffs)")
		settle   = flag.Duration("settle", 10*time.Millisecond, "W2: how long the waiter waits before the holder releases")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q", flag.Args()))
	}
	o := bench.Options{
		Embedded: *embedded, Warmup: *warmup, Window: *duration, Repeat: *repeat,
		Only: split(*only), Impls: split(*impls), LuaPath: *luaPath,
		Handoffs: *handoffs, HandoffMax: *hmax, Settle: *settle, Progress: os.Stderr,
	}
	if *nodes != "" {
		if *embedded {
			fail(errors.New("-nodes and -embedded exclude each other"))
		}
		o.Addrs = split(*nodes)
	}
	for _, s := range split(*nodeSets) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fail(fmt.Errorf("bad -nodesets entry %q", s))
		}
		o.NodeSets = append(o.NodeSets, n)
	}
	if *duration <= 0 || *warmup < 0 || *handoffs <= 0 {
		fail(errors.New("-duration and -handoffs must be positive, -warmup not negative"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, o)
	if err != nil && rep == nil {
		fail(err)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "redlock-bench: interrupted: %v (partial results follow)\n", err)
	}
	md := rep.Markdown()
	fmt.Print(md)
	if *mdOut != "" {
		if err := writeFile(*mdOut, []byte(md)); err != nil {
			fail(err)
		}
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			fail(err)
		}
		if err := writeFile(*jsonOut, append(b, '\n')); err != nil {
			fail(err)
		}
	}
	if err != nil {
		os.Exit(1)
	}
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

func fail(err error) {
	fmt.Fprintf(os.Stderr, "redlock-bench: %v\n", err)
	os.Exit(2)
}
