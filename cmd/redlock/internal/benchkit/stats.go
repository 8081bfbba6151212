package benchkit

import (
	"slices"
	"time"
)

// Metrics is the outcome of one measured window (or, in Result.Median, the
// per-field median over the repeats; Overlaps, OutOfOrder and Errors are
// summed there, MaxConcurrent is the maximum and the Served counts the minimum). Durations are in nanoseconds in JSON.
type Metrics struct {
	Window    time.Duration `json:"window_ns"`
	Ops       int           `json:"ops"` // successful acquisitions completed in the window (W3/W4: acquire+release pairs)
	OpsPerSec float64       `json:"ops_per_sec"`
	Samples   int           `json:"samples"` // latency samples (ops, plus pending waits for W1/W5)
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	Mean      time.Duration `json:"mean_ns"`
	Max       time.Duration `json:"max_ns"`
	Clients   int           `json:"clients,omitempty"`
	Served    int           `json:"served,omitempty"`  // clients with at least one acquisition in the window
	Pending   int           `json:"pending,omitempty"` // waits still pending at window end (counted into the latencies)
	Handoffs  int           `json:"handoffs,omitempty"`
	Overlaps  int64         `json:"overlaps"` // safety violations: more holders inside the critical section than allowed (CountDownLatch: waiters released before the last CountDown)
	Errors    int64         `json:"errors"`   // acquire/release errors other than the window's end
	ErrSample string        `json:"err_sample,omitempty"`

	// Semaphore: the most holders seen inside at once (≤ permits).
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// FairLock: grants made while another client, whose Acquire had started
	// more than the ordering slack earlier, was still waiting.
	OutOfOrder int64 `json:"out_of_order,omitempty"`

	// RWLock: per side. Joint is reads/s + 8·writes/s (bound 160/s).
	ReadOps      int           `json:"read_ops,omitempty"`
	ReadsPerSec  float64       `json:"reads_per_sec,omitempty"`
	ReadP50      time.Duration `json:"read_p50_ns,omitempty"`
	ReadP99      time.Duration `json:"read_p99_ns,omitempty"`
	ReadServed   int           `json:"read_served,omitempty"`
	WriteOps     int           `json:"write_ops,omitempty"`
	WritesPerSec float64       `json:"writes_per_sec,omitempty"`
	WriteP50     time.Duration `json:"write_p50_ns,omitempty"`
	WriteP99     time.Duration `json:"write_p99_ns,omitempty"`
	WriteServed  int           `json:"write_served,omitempty"`
	Joint        float64       `json:"joint,omitempty"`

	// CountDownLatch: P50/P99/Mean/Max are per round, from the last
	// CountDown call's start to the last of the round's waiters released;
	// these are per waiter.
	WaiterP50 time.Duration `json:"waiter_p50_ns,omitempty"`
	WaiterP99 time.Duration `json:"waiter_p99_ns,omitempty"`
}

// summarize fills the latency fields from lat (it sorts lat).
func (m *Metrics) summarize(lat []time.Duration) {
	m.Samples = len(lat)
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	m.P50 = pct(lat, 0.50)
	m.P99 = pct(lat, 0.99)
	m.Max = lat[len(lat)-1]
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	m.Mean = sum / time.Duration(len(lat))
}

// pct is the nearest-rank percentile of sorted s.
func pct(s []time.Duration, p float64) time.Duration {
	i := int(float64(len(s))*p+0.999999) - 1
	i = max(0, min(i, len(s)-1))
	return s[i]
}

func medianOf[T int | int64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		var z T
		return z
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// median combines repeats.
func median(rs []Metrics) Metrics {
	if len(rs) == 1 {
		return rs[0]
	}
	pick := func(f func(Metrics) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return medianOf(xs)
	}
	d := func(f func(Metrics) time.Duration) time.Duration {
		return time.Duration(pick(func(m Metrics) float64 { return float64(f(m)) }))
	}
	n := func(f func(Metrics) int) int { return int(pick(func(m Metrics) float64 { return float64(f(m)) })) }
	out := Metrics{
		Window:    d(func(m Metrics) time.Duration { return m.Window }),
		Ops:       n(func(m Metrics) int { return m.Ops }),
		OpsPerSec: pick(func(m Metrics) float64 { return m.OpsPerSec }),
		Samples:   n(func(m Metrics) int { return m.Samples }),
		P50:       d(func(m Metrics) time.Duration { return m.P50 }),
		P99:       d(func(m Metrics) time.Duration { return m.P99 }),
		Mean:      d(func(m Metrics) time.Duration { return m.Mean }),
		Max:       d(func(m Metrics) time.Duration { return m.Max }),
		Clients:   rs[0].Clients,
		Served:    rs[0].Served,
		Pending:   n(func(m Metrics) int { return m.Pending }),
		Handoffs:  n(func(m Metrics) int { return m.Handoffs }),

		ReadOps:      n(func(m Metrics) int { return m.ReadOps }),
		ReadsPerSec:  pick(func(m Metrics) float64 { return m.ReadsPerSec }),
		ReadP50:      d(func(m Metrics) time.Duration { return m.ReadP50 }),
		ReadP99:      d(func(m Metrics) time.Duration { return m.ReadP99 }),
		ReadServed:   rs[0].ReadServed,
		WriteOps:     n(func(m Metrics) int { return m.WriteOps }),
		WritesPerSec: pick(func(m Metrics) float64 { return m.WritesPerSec }),
		WriteP50:     d(func(m Metrics) time.Duration { return m.WriteP50 }),
		WriteP99:     d(func(m Metrics) time.Duration { return m.WriteP99 }),
		WriteServed:  rs[0].WriteServed,
		Joint:        pick(func(m Metrics) float64 { return m.Joint }),
		WaiterP50:    d(func(m Metrics) time.Duration { return m.WaiterP50 }),
		WaiterP99:    d(func(m Metrics) time.Duration { return m.WaiterP99 }),
	}
	for _, r := range rs {
		out.Served = min(out.Served, r.Served)
		out.ReadServed = min(out.ReadServed, r.ReadServed)
		out.WriteServed = min(out.WriteServed, r.WriteServed)
		out.MaxConcurrent = max(out.MaxConcurrent, r.MaxConcurrent)
		out.OutOfOrder += r.OutOfOrder
		out.Overlaps += r.Overlaps
		out.Errors += r.Errors
		if out.ErrSample == "" {
			out.ErrSample = r.ErrSample
		}
	}
	return out
}
