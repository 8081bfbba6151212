package bench

import (
	"slices"
	"time"
)

// Metrics is the outcome of one measured window (or, in Result.Median, the
// per-field median over the repeats; Overlaps and Errors are summed there and
// Served is the minimum). Durations are in nanoseconds in JSON.
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
	Overlaps  int64         `json:"overlaps"` // times two holders were inside the critical section at once
	Errors    int64         `json:"errors"`   // acquire/release errors other than the window's end
	ErrSample string        `json:"err_sample,omitempty"`
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
	}
	for _, r := range rs {
		out.Served = min(out.Served, r.Served)
		out.Overlaps += r.Overlaps
		out.Errors += r.Errors
		if out.ErrSample == "" {
			out.ErrSample = r.ErrSample
		}
	}
	return out
}
