package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

func status(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: redlock status [--kind lock|fairlock|rwlock|semaphore|latch] [--json] [--nodes host:port,...] [--tls-ca FILE] KEY")
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print JSON")
	kind := fs.String("kind", "lock", "primitive of that name: lock (also MultiLock names), fairlock, rwlock, semaphore or latch")
	nodesFlag := fs.String("nodes", "", "comma-separated host:port or redis:// (rediss:// for TLS) URLs (default: REDLOCK_NODES)")
	tlsCA := tlsCAFlag(fs)
	// Accept the key before or after the flags.
	var key string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		key, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if key == "" && fs.NArg() > 0 {
		key = fs.Arg(0)
	}
	if key == "" {
		return &codeError{code: 2, err: errors.New("no key given (redlock status KEY)")}
	}
	nodes := nodesFrom(*nodesFlag)
	if len(nodes) == 0 {
		return &codeError{code: 2, err: errors.New("no nodes: pass --nodes host:port,... or set REDLOCK_NODES")}
	}
	tlsConf, err := tlsFrom(*tlsCA)
	if err != nil {
		return err
	}
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: nodes, Logger: quietLogger(), TLS: tlsConf})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var states []primitives.NodeState
	switch *kind {
	case "lock":
		l, err := primitives.NewLock(c, key)
		if err != nil {
			return err
		}
		states = l.Status(ctx)
	case "fairlock":
		l, err := primitives.NewFairLock(c, key)
		if err != nil {
			return err
		}
		states = l.Status(ctx)
	case "rwlock":
		rw, err := primitives.NewRWLock(c, key)
		if err != nil {
			return err
		}
		for _, st := range rw.Status(ctx) {
			ns := primitives.NodeState{Node: st.Node, Err: st.Err, State: "free", Holder: st.Writer, Fence: st.Fence,
				Waiters: st.WaitingWriters + st.WaitingReaders}
			switch {
			case st.Writer != "":
				ns.State = "write"
			case st.Readers > 0:
				ns.State = fmt.Sprintf("read×%d", st.Readers)
			}
			states = append(states, ns)
		}
	case "semaphore":
		// any permit count will do: Status reads what is stored
		s, err := primitives.NewSemaphore(c, key, 1)
		if err != nil {
			return err
		}
		states = s.Status(ctx)
	case "latch":
		l, err := primitives.NewCountDownLatch(c, key, 0)
		if err != nil {
			return err
		}
		states = l.Status(ctx)
	default:
		return &codeError{code: 2, err: fmt.Errorf("unknown --kind %q (lock, fairlock, rwlock, semaphore or latch)", *kind)}
	}
	health := c.Nodes()
	if *asJSON {
		type row struct {
			Node      string `json:"node"`
			Up        bool   `json:"up"`
			LatencyUs int64  `json:"latency_us"`
			State     string `json:"state,omitempty"`
			Holder    string `json:"holder,omitempty"`
			TTLMs     int64  `json:"ttl_ms"`
			Fence     string `json:"fence,omitempty"`
			Waiters   int64  `json:"waiters"`
			Error     string `json:"error,omitempty"`
		}
		rows := make([]row, len(states))
		for i, s := range states {
			rows[i] = row{Node: s.Node, Up: health[i].Up, LatencyUs: health[i].Latency.Microseconds(), State: s.State,
				Holder: s.Holder, TTLMs: s.TTL.Milliseconds(), Fence: s.Fence, Waiters: s.Waiters}
			if s.Err != nil {
				rows[i].Error = s.Err.Error()
			}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"key": key, "quorum": c.Quorum(), "nodes": rows})
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tUP\tLATENCY\tSTATE\tHOLDER\tTTL\tFENCE\tWAITERS\n")
	for i, s := range states {
		if s.Err != nil {
			fmt.Fprintf(tw, "%s\t%v\t%s\terror: %v\t\t\t\t\n", s.Node, health[i].Up, health[i].Latency.Round(time.Microsecond), s.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t%s\t%d\n", s.Node, health[i].Up, health[i].Latency.Round(time.Microsecond),
			s.State, s.Holder, s.TTL.Round(time.Millisecond), s.Fence, s.Waiters)
	}
	return tw.Flush()
}
