// Command oppath lists the library files one Lock.Acquire and one
// Lease.Release enter, in the steady state (after a warm-up), on one
// redis-server it starts. It is a measuring tool of issue 39; run it
// through scripts/metrics.sh, which builds it with coverage counters.
//
// It clears the counters, runs the operation, and writes them: the files
// with a counted block are the files the operation entered. Background
// goroutines (a node's health check, the renewer) run beside it; the
// operation is run -n times and a file counts only when it was entered
// on every run, so a tick that falls into one run is not counted.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/coverage"
	"sort"
	"strings"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/redisproc"
	"github.com/redlock-go/redlock/primitives"
)

func main() {
	runs := flag.Int("n", 5, "runs of each operation; a file counts when every run entered it")
	flag.Parse()
	if err := run(*runs); err != nil {
		fmt.Fprintln(os.Stderr, "oppath:", err)
		os.Exit(1)
	}
}

func run(runs int) error {
	srv, err := redisproc.Start(redisproc.Config{})
	if err != nil {
		return err
	}
	defer srv.Close()
	ctx := context.Background()
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: []string{srv.Addr()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := primitives.NewLock(c, "oppath")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "oppath-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	acq, rel := map[string]int{}, map[string]int{}
	for i := range runs + 1 { // the first is the warm-up
		if err := coverage.ClearCounters(); err != nil {
			return err
		}
		lease, err := l.Acquire(ctx)
		if err != nil {
			return err
		}
		a, err := entered(tmp, fmt.Sprintf("a%d", i))
		if err != nil {
			return err
		}
		if err := coverage.ClearCounters(); err != nil {
			return err
		}
		if err := lease.Release(ctx); err != nil {
			return err
		}
		r, err := entered(tmp, fmt.Sprintf("r%d", i))
		if err != nil {
			return err
		}
		if i > 0 {
			count(acq, a)
			count(rel, r)
		}
	}
	report("Lock.Acquire", acq, runs)
	report("Lease.Release", rel, runs)
	return nil
}

// entered writes the counters to a fresh directory under tmp and returns
// the library files with a counted block.
func entered(tmp, name string) ([]string, error) {
	dir := filepath.Join(tmp, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	if err := coverage.WriteMetaDir(dir); err != nil {
		return nil, err
	}
	if err := coverage.WriteCountersDir(dir); err != nil {
		return nil, err
	}
	prof := filepath.Join(tmp, name+".txt")
	out, err := exec.Command("go", "tool", "covdata", "textfmt", "-i", dir, "-o", prof).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("covdata: %v: %s", err, out)
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		return nil, err
	}
	files := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// file:start,end statements count
		f, rest, ok := strings.Cut(line, ":")
		if !ok || strings.HasSuffix(rest, " 0") || strings.Contains(f, "/scripts/oppath/") {
			continue
		}
		files[strings.TrimPrefix(f, "github.com/redlock-go/redlock/")] = true
	}
	var out2 []string
	for f := range files {
		out2 = append(out2, f)
	}
	return out2, nil
}

func count(m map[string]int, files []string) {
	for _, f := range files {
		m[f]++
	}
}

func report(op string, m map[string]int, runs int) {
	var files []string
	pkgs := map[string]bool{}
	for f, n := range m {
		if n == runs {
			files = append(files, f)
			pkgs[filepath.Dir(f)] = true
		}
	}
	sort.Strings(files)
	fmt.Printf("%s enters %d files in %d packages:\n", op, len(files), len(pkgs))
	for _, f := range files {
		fmt.Printf("  %s\n", f)
	}
}
