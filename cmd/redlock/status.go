package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

func status(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: redlock status [--kind lock|fairlock|rwlock|semaphore|latch] [--json] [--watch] [--nodes host:port,...] [--tls-ca FILE] KEY")
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Bool("watch", false, "lock only: print who leads (leading, none, unknown) at each change, until interrupted")
	kind := fs.String("kind", "lock", "primitive of that name: lock (also MultiLock names), fairlock, rwlock, semaphore or latch")
	nodesFlag := fs.String("nodes", "", "comma-separated host:port or redis:// (rediss:// for TLS) URLs (default: REDLOCK_NODES)")
	tlsCA := tlsCAFlag(fs)
	key, err := parseNamed(fs, args)
	if err != nil {
		return err
	}
	if key == "" {
		return usageErr("no NAME given (redlock status NAME)")
	}
	nodes := nodesFrom(*nodesFlag)
	if len(nodes) == 0 {
		return errNoNodes
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
	if *watch {
		if *kind != "lock" {
			return usageErr("--watch: only --kind lock, not %q", *kind)
		}
		return watchLeader(ctx, c, key, *asJSON, out)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var states []primitives.NodeState
	var quorum *primitives.QuorumState // Lock, FairLock
	var rwq *primitives.RWQuorum
	var semq *primitives.SemaphoreQuorum
	var rwStates []primitives.RWNodeState
	switch *kind {
	case "lock":
		l, err := primitives.NewLock(c, key)
		if err != nil {
			return err
		}
		states = l.Status(ctx)
		q := primitives.QuorumOf(states, c.Quorum())
		quorum = &q
	case "fairlock":
		l, err := primitives.NewFairLock(c, key)
		if err != nil {
			return err
		}
		states = l.Status(ctx)
		q := primitives.QuorumOf(states, c.Quorum())
		quorum = &q
	case "rwlock":
		rw, err := primitives.NewRWLock(c, key)
		if err != nil {
			return err
		}
		rwStates = rw.Status(ctx)
		q := primitives.RWQuorumOf(rwStates, c.Quorum())
		rwq = &q
		for _, st := range rwStates {
			ns := primitives.NodeState{Node: st.Node, Err: st.Err, State: "free", Holder: st.Writer, Fence: st.Fence,
				Waiters: st.WaitingWriters + st.WaitingReaders, Info: st.WriterInfo}
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
		q := primitives.SemaphoreQuorumOf(states, c.Quorum())
		semq = &q
	case "latch":
		l, err := primitives.NewCountDownLatch(c, key, 0)
		if err != nil {
			return err
		}
		states = l.Status(ctx)
	default:
		return usageErr("--kind %q: want lock, fairlock, rwlock, semaphore or latch", *kind)
	}
	health := c.Nodes()
	if *asJSON {
		type row struct {
			Node      string       `json:"node"`
			Up        bool         `json:"up"`
			LatencyUs int64        `json:"latency_us"`
			State     string       `json:"state,omitempty"`
			Holder    string       `json:"holder,omitempty"`
			Info      *holderJSON  `json:"holder_info,omitempty"`
			TTLMs     int64        `json:"ttl_ms"`
			Fence     string       `json:"fence,omitempty"`
			Waiters   int64        `json:"waiters"`
			Queue     []holderJSON `json:"queue,omitempty"`
			Readers   []holderJSON `json:"readers,omitempty"`         // rwlock
			ReadQueue []holderJSON `json:"waiting_readers,omitempty"` // rwlock
			Permits   []permitJSON `json:"permits,omitempty"`         // semaphore
			Error     string       `json:"error,omitempty"`
			Guarded   bool         `json:"guarded,omitempty"`       // held out of every quorum by the node guard
			Until     string       `json:"guarded_until,omitempty"` // RFC 3339, when guarded
			Identity  string       `json:"identity,omitempty"`      // run_id/master_replid
		}
		rows := make([]row, len(states))
		for i, s := range states {
			rows[i] = row{Node: s.Node, Up: health[i].Up, LatencyUs: health[i].Latency.Microseconds(), State: s.State,
				Holder: s.Holder, Info: infoJSON(s.Info), TTLMs: s.TTL.Milliseconds(), Fence: s.Fence, Waiters: s.Waiters,
				Queue: queueJSON(s.Queue), Permits: permitsJSON(s.Permits),
				Guarded: health[i].Guarded, Identity: health[i].Identity}
			if health[i].Guarded && !health[i].GuardedUntil.IsZero() {
				rows[i].Until = health[i].GuardedUntil.Format(time.RFC3339Nano)
			}
			if rwStates != nil {
				st := rwStates[i]
				rows[i].Queue, rows[i].Readers, rows[i].ReadQueue = queueJSON(st.WriterQueue), queueJSON(st.ReaderInfo), queueJSON(st.ReaderWaiters)
			}
			if s.Err != nil {
				rows[i].Error = s.Err.Error()
			}
		}
		doc := map[string]any{"key": key, "quorum": c.Quorum(), "nodes": rows}
		if quorum != nil {
			doc["view"] = map[string]any{"state": quorum.State, "holder": infoJSON(quorum.Holder), "nodes": quorum.Nodes,
				"fence": quorum.Fence, "waiters": queueJSON(quorum.Waiters), "summary": quorum.String()}
		}
		if rwq != nil {
			doc["view"] = map[string]any{"state": rwq.State, "writer": infoJSON(rwq.Writer), "readers": queueJSON(rwq.Readers),
				"fence": rwq.Fence, "waiting_writers": queueJSON(rwq.WaitingWriters), "waiting_readers": queueJSON(rwq.WaitingReaders),
				"summary": rwq.String()}
		}
		if semq != nil {
			doc["view"] = map[string]any{"permits": semq.Permits, "holders": permitsJSON(semq.Holders),
				"waiters": queueJSON(semq.Waiters), "summary": semq.String()}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
		return statusAnswered(states, health, c.Quorum())
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tUP\tLATENCY\tSTATE\tHOLDER\tLABEL\tHOST\tPID\tSINCE\tTTL\tFENCE\tWAITERS\n")
	for i, s := range states {
		if s.Err != nil {
			fmt.Fprintf(tw, "%s\t%v\t%s\terror: %v\t\t\t\t\t\t\t\t\n", s.Node, health[i].Up, health[i].Latency.Round(time.Microsecond), s.Err)
			continue
		}
		pid, since := "", ""
		if s.Info.PID > 0 {
			pid = fmt.Sprint(s.Info.PID)
		}
		if !s.Info.Since.IsZero() {
			since = s.Info.Since.Format("15:04:05")
		}
		holder, label := s.Holder, s.Info.Label
		// several holders (semaphore permits, rwlock readers): their names
		var names []string
		for _, p := range s.Permits {
			names = append(names, p.Holder.Name())
		}
		if rwStates != nil && s.Holder == "" {
			for _, r := range rwStates[i].ReaderInfo {
				names = append(names, r.Name())
			}
		}
		if len(names) > 0 {
			holder, label = strings.Join(names, ","), ""
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.Node, health[i].Up, health[i].Latency.Round(time.Microsecond),
			s.State, holder, label, s.Info.Host, pid, since, s.TTL.Round(time.Millisecond), s.Fence, s.Waiters)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, h := range health {
		if u := unarmedBy(h); u != nil && !h.Guarded {
			fmt.Fprintf(out, "node %s: cannot grant: %v\n", h.Addr, u)
		}
		if h.Guarded {
			until := "undecided"
			if !h.GuardedUntil.IsZero() {
				until = h.GuardedUntil.Format("15:04:05.000") + " (" + time.Until(h.GuardedUntil).Round(time.Second).String() + ")"
			}
			fmt.Fprintf(out, "node %s: guarded (it restarted, failed over or was flushed) until %s\n", h.Addr, until)
		}
	}
	waiters := func(what string, ws []primitives.HolderInfo) {
		for i, w := range ws {
			fmt.Fprintf(out, "  %s %d: %s (%s)%s waiting since %s\n", what, i+1, w.Name(), w.ID, onHost(w), w.Since.Format("15:04:05"))
		}
	}
	switch {
	case quorum != nil:
		fmt.Fprintf(out, "quorum (%d of %d): %s\n", c.Quorum(), len(states), quorum)
		waiters("waiter", quorum.Waiters)
	case rwq != nil:
		fmt.Fprintf(out, "quorum (%d of %d): %s\n", c.Quorum(), len(states), rwq)
		for i, r := range rwq.Readers {
			fmt.Fprintf(out, "  reader %d: %s (%s)%s since %s\n", i+1, r.Name(), r.ID, onHost(r), r.Since.Format("15:04:05"))
		}
		waiters("waiting writer", rwq.WaitingWriters)
		waiters("waiting reader", rwq.WaitingReaders)
	case semq != nil:
		fmt.Fprintf(out, "quorum (%d of %d): %s\n", c.Quorum(), len(states), semq)
		for _, p := range semq.Holders {
			h := p.Holder
			if p.Reserved {
				fmt.Fprintf(out, "  permit slot %d: reserved for %s (%s)%s (handoff)\n", p.Slot, h.Name(), h.ID, onHost(h))
				continue
			}
			fmt.Fprintf(out, "  permit slot %d: %s (%s)%s since %s\n", p.Slot, h.Name(), h.ID, onHost(h), h.Since.Format("15:04:05"))
		}
		waiters("waiter", semq.Waiters)
	}
	return statusAnswered(states, health, c.Quorum())
}

type permitJSON struct {
	Slot     int        `json:"slot"`
	Reserved bool       `json:"reserved,omitempty"`
	Holder   holderJSON `json:"holder"`
}

func permitsJSON(ps []primitives.PermitHolder) []permitJSON {
	var out []permitJSON
	for _, p := range ps {
		if j := infoJSON(p.Holder); j != nil {
			out = append(out, permitJSON{Slot: p.Slot, Reserved: p.Reserved, Holder: *j})
		}
	}
	return out
}

type holderJSON struct {
	ID    string `json:"id"`
	Label string `json:"label,omitempty"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	Since string `json:"since,omitempty"`
}

func infoJSON(h primitives.HolderInfo) *holderJSON {
	if h.ID == "" {
		return nil
	}
	j := &holderJSON{ID: h.ID, Label: h.Label, Host: h.Host, PID: h.PID}
	if !h.Since.IsZero() {
		j.Since = h.Since.UTC().Format(time.RFC3339Nano)
	}
	return j
}

func queueJSON(q []primitives.HolderInfo) []holderJSON {
	var out []holderJSON
	for _, h := range q {
		if j := infoJSON(h); j != nil {
			out = append(out, *j)
		}
	}
	return out
}

func onHost(h primitives.HolderInfo) string {
	s := ""
	if h.Host != "" {
		s += " on " + h.Host
	}
	if h.PID > 0 {
		s += fmt.Sprintf(" pid %d", h.PID)
	}
	return s
}

// parseNamed parses fs from args with the one positional argument (a
// resource name) before, between or after the flags; "" if none was
// given. A second positional argument is an error (exit 2).
func parseNamed(fs *flag.FlagSet, args []string) (string, error) {
	if err := checkUnits(fs, args); err != nil {
		return "", err
	}
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", &codeError{code: 2, err: err}
		}
		if fs.NArg() == 0 {
			break
		}
		// flag stops at the first non-flag: take it, parse the rest
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch len(names) {
	case 0:
		return "", nil
	case 1:
		return names[0], nil
	}
	return "", usageErr("one NAME expected, got %d (%q): a MultiLock's names are not shown together", len(names), names)
}

// usageErr is a bad-input error of a command: it wraps ErrInvalidArgument,
// like the library's, and exits 2.
func usageErr(format string, args ...any) error {
	return &codeError{code: 2, err: fmt.Errorf("%w: "+format, append([]any{coordinator.ErrInvalidArgument}, args...)...)}
}

// statusAnswered fails a status that fewer than a quorum of nodes answered
// without an error (the table was printed first): the quorum's view is
// unknown, and a script must not read it as free.
// A node that answered but cannot grant (the node guard holds it out,
// or it refused the guard's arming: OOM, MISCONF...) does not count
// either: every acquire would fail while the keys read free.
func statusAnswered(states []primitives.NodeState, health []coordinator.NodeStatus, quorum int) error {
	ok := 0
	var first error
	for i, s := range states {
		err := s.Err
		if err == nil && i < len(health) {
			if health[i].Guarded {
				err = fmt.Errorf("node %s: %w", health[i].Addr, coordinator.ErrNodeGuarded)
			} else {
				err = unarmedBy(health[i])
			}
		}
		if err == nil {
			ok++
		} else if first == nil {
			first = err
		}
	}
	if ok >= quorum {
		return nil
	}
	hint := ""
	if errors.Is(first, primitives.ErrWrongType) || strings.Contains(first.Error(), "WRONGTYPE") {
		hint = " (a key of another type or primitive is at that name: try --kind, or look at the key)"
	}
	return fmt.Errorf("%d of %d nodes answered, need %d: %w%s", ok, len(states), quorum, first, hint)
}

// unarmedBy returns the node's reply that keeps the node guard from
// arming it (OOM, MISCONF, NOPERM...), or nil.
func unarmedBy(h coordinator.NodeStatus) error {
	if !h.Up || !errors.Is(h.LastErr, coordinator.ErrNotArmed) {
		return nil
	}
	return h.LastErr
}
