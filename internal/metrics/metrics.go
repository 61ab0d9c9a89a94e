// Package metrics keeps rbdfence's Prometheus textfile (node_exporter
// textfile-collector convention). Each run adds its counts to the totals in
// the file and rewrites it atomically; the text format is the Prometheus
// client library's, never hand-written.
package metrics

import (
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

// durationBuckets of the run duration histogram, in seconds.
var durationBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Run is what one run did.
type Run struct {
	Op       string // check, fence, prestart, hook, postmigrate, ...
	Duration time.Duration
	Images   int    // images inspected
	Fenced   int    // clients fenced
	Refused  bool   // a start was refused
	Error    string // error kind ("" on success): ceph, refused, failure, usage, oned, ssh
	At       time.Time
}

// Metric names.
const (
	Runs      = "rbdfence_runs_total"
	Images    = "rbdfence_images_checked_total"
	Fences    = "rbdfence_fences_total"
	Refusals  = "rbdfence_refusals_total"
	Errors    = "rbdfence_errors_total"
	LastRun   = "rbdfence_last_run_timestamp_seconds"
	LastOK    = "rbdfence_last_run_success"
	Durations = "rbdfence_run_duration_seconds"
)

var help = map[string]string{
	Runs:      "Runs of rbdfence, by operation.",
	Images:    "RBD images inspected.",
	Fences:    "Foreign clients fenced (blocklisted, lock broken).",
	Refusals:  "VM starts refused (claim held elsewhere, newer deploy, check impossible and fail-closed).",
	Errors:    "Runs that ended in an error, by kind.",
	LastRun:   "Unix time of the last run, by operation.",
	LastOK:    "1 if the last run of this operation succeeded.",
	Durations: "Wall time of runs, by operation.",
}

// Record adds r to the totals in the textfile at path and rewrites it
// atomically. Concurrent runs are serialised with a lock file beside it.
// An unreadable old file is replaced (the counters restart), not fatal.
func Record(path string, r Run) error {
	if path == "" {
		return nil
	}
	if r.At.IsZero() {
		r.At = time.Now()
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("metrics %s: %w", path, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("metrics %s: %w", path, err)
	}
	old, _ := Read(path)
	s := newState(old)
	s.add(r)
	reg := prometheus.NewRegistry()
	if err := reg.Register(s); err != nil {
		return err
	}
	if err := prometheus.WriteToTextfile(path, reg); err != nil {
		return fmt.Errorf("metrics %s: %w", path, err)
	}
	return os.Chmod(path, 0o644)
}

// Read parses a textfile with the Prometheus text parser.
func Read(path string) (map[string]*dto.MetricFamily, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(f)
}

type key struct{ op, kind string }

type hist struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64
}

// state is the merged totals; it is a prometheus.Collector of const metrics.
type state struct {
	counters map[string]map[key]float64
	gauges   map[string]map[key]float64
	hists    map[string]*hist
}

func newState(old map[string]*dto.MetricFamily) *state {
	s := &state{counters: map[string]map[key]float64{}, gauges: map[string]map[key]float64{}, hists: map[string]*hist{}}
	for _, n := range []string{Runs, Images, Fences, Refusals, Errors} {
		s.counters[n] = map[key]float64{}
	}
	for _, n := range []string{LastRun, LastOK} {
		s.gauges[n] = map[key]float64{}
	}
	for name, mf := range old {
		for _, m := range mf.GetMetric() {
			k := key{}
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "op":
					k.op = l.GetValue()
				case "kind":
					k.kind = l.GetValue()
				}
			}
			switch {
			case s.counters[name] != nil && m.GetCounter() != nil:
				s.counters[name][k] = m.GetCounter().GetValue()
			case s.gauges[name] != nil && m.GetGauge() != nil:
				s.gauges[name][k] = m.GetGauge().GetValue()
			case name == Durations && m.GetHistogram() != nil:
				h := &hist{count: m.GetHistogram().GetSampleCount(), sum: m.GetHistogram().GetSampleSum(), buckets: map[float64]uint64{}}
				for _, b := range m.GetHistogram().GetBucket() {
					h.buckets[b.GetUpperBound()] = b.GetCumulativeCount()
				}
				s.hists[k.op] = h
			}
		}
	}
	return s
}

func (s *state) add(r Run) {
	k := key{op: r.Op}
	s.counters[Runs][k]++
	s.counters[Images][k] += float64(r.Images)
	s.counters[Fences][k] += float64(r.Fenced)
	if r.Refused {
		s.counters[Refusals][k]++
	}
	if r.Error != "" {
		s.counters[Errors][key{op: r.Op, kind: r.Error}]++
	}
	s.gauges[LastRun][k] = float64(r.At.UnixNano()) / 1e9
	ok := 0.0
	if r.Error == "" {
		ok = 1
	}
	s.gauges[LastOK][k] = ok
	h := s.hists[r.Op]
	if h == nil {
		h = &hist{buckets: map[float64]uint64{}}
		s.hists[r.Op] = h
	}
	d := r.Duration.Seconds()
	h.count++
	h.sum += d
	for _, b := range durationBuckets {
		if d <= b {
			h.buckets[b]++
		}
	}
}

// Describe implements prometheus.Collector (unchecked collector).
func (s *state) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (s *state) Collect(ch chan<- prometheus.Metric) {
	emit := func(name string, vt prometheus.ValueType, m map[key]float64) {
		keys := make([]key, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].op+keys[i].kind < keys[j].op+keys[j].kind })
		for _, k := range keys {
			labels, values := []string{"op"}, []string{k.op}
			if name == Errors {
				labels, values = append(labels, "kind"), append(values, k.kind)
			}
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help[name], labels, nil), vt, m[k], values...)
		}
	}
	for _, n := range []string{Runs, Images, Fences, Refusals, Errors} {
		emit(n, prometheus.CounterValue, s.counters[n])
	}
	for _, n := range []string{LastRun, LastOK} {
		emit(n, prometheus.GaugeValue, s.gauges[n])
	}
	for op, h := range s.hists {
		b := map[float64]uint64{}
		for _, ub := range durationBuckets {
			b[ub] = h.buckets[ub]
		}
		ch <- prometheus.MustNewConstHistogram(prometheus.NewDesc(Durations, help[Durations], []string{"op"}, nil), h.count, h.sum, b, op)
	}
}

// Value returns the value of a counter or gauge sample with the given labels
// (tests and doctor).
func Value(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}
