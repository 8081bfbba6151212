package torture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// WorkerEnd is a worker's last line.
type WorkerEnd struct {
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

// collector gathers the workers' JSON lines.
type collector struct {
	mu      sync.Mutex
	holds   []Hold
	latch   []LatchCall
	ends    map[int]WorkerEnd
	readyCh chan int
	garbage []string
}

func newCollector(procs int) *collector {
	return &collector{ends: map[int]WorkerEnd{}, readyCh: make(chan int, procs)}
}

// line takes one line of a worker's stdout. A line that does not parse
// as its record is kept (up to 5 samples) as unparsed, which fails the run:
// a critical section dropped here could hide an overlap.
func (c *collector) line(worker int, b []byte) {
	var head struct {
		Type string `json:"type"`
	}
	err := json.Unmarshal(b, &head)
	if err == nil {
		switch head.Type {
		case "cs":
			var r Hold
			if err = json.Unmarshal(b, &r); err == nil {
				r.Worker = worker
				c.mu.Lock()
				c.holds = append(c.holds, r)
				c.mu.Unlock()
			}
		case "latch":
			var l LatchCall
			if err = json.Unmarshal(b, &l); err == nil {
				l.Worker = worker
				c.mu.Lock()
				c.latch = append(c.latch, l)
				c.mu.Unlock()
			}
		case "end":
			var e WorkerEnd
			if err = json.Unmarshal(b, &e); err == nil {
				e.Worker = worker
				c.mu.Lock()
				c.ends[worker] = e
				c.mu.Unlock()
			}
		case "ready":
			c.readyCh <- worker
		default:
			err = fmt.Errorf("unknown record type %q", head.Type)
		}
	}
	if err != nil {
		c.mu.Lock()
		if len(c.garbage) < 5 {
			c.garbage = append(c.garbage, fmt.Sprintf("worker %d: %q", worker, b))
		}
		c.mu.Unlock()
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
	return len(c.holds)
}

// records is what was collected: the critical sections, the latch calls,
// the workers' last lines in worker order and the lines that did not parse.
type records struct {
	holds   []Hold
	latch   []LatchCall
	ends    []WorkerEnd
	garbage []string
}

func (c *collector) snapshot() records {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := records{holds: slices.Clone(c.holds), latch: slices.Clone(c.latch), garbage: slices.Clone(c.garbage)}
	for _, e := range c.ends {
		r.ends = append(r.ends, e)
	}
	slices.SortFunc(r.ends, func(a, b WorkerEnd) int { return a.Worker - b.Worker })
	return r
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

// proc is one worker process started by the parent.
type proc struct {
	id     int
	cmd    *exec.Cmd
	done   <-chan struct{}
	stderr *tailBuffer
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}
