// Package metrics keeps rbdfence's Prometheus textfile (node_exporter
// textfile-collector convention). Each run adds its counts to the totals in
// the file and rewrites it atomically; the text format is the Prometheus
// client library's, never hand-written.
package metrics

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

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
	if err := writeFile(path, s.families()); err != nil {
		return fmt.Errorf("metrics %s: %w", path, err)
	}
	return nil
}

// writeFile writes mfs in the text format (prometheus/common/expfmt, the
// client library's encoder) to a temporary file beside path and renames it
// over path, mode 0644. The Prometheus client registry is not used: its
// package init registers Go and process collectors on every start of every
// program that links it, metrics configured or not.
func writeFile(path string, mfs []*dto.MetricFamily) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: gone already
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(tmp, mf); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
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

// state is the merged totals.
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

// families returns the totals as metric families in the order the Prometheus
// client registry gathers them: families by name, samples by label values.
func (s *state) families() []*dto.MetricFamily {
	var out []*dto.MetricFamily
	family := func(name string, t dto.MetricType) *dto.MetricFamily {
		mf := &dto.MetricFamily{Name: ptr(name), Help: ptr(help[name]), Type: t.Enum()}
		out = append(out, mf)
		return mf
	}
	labels := func(name string, k key) []*dto.LabelPair {
		if name == Errors { // label pairs sorted by name, as the registry writes them
			return []*dto.LabelPair{{Name: ptr("kind"), Value: ptr(k.kind)}, {Name: ptr("op"), Value: ptr(k.op)}}
		}
		return []*dto.LabelPair{{Name: ptr("op"), Value: ptr(k.op)}}
	}
	sortedKeys := func(m map[key]float64) []key {
		keys := make([]key, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].kind != keys[j].kind {
				return keys[i].kind < keys[j].kind
			}
			return keys[i].op < keys[j].op
		})
		return keys
	}
	for n, m := range s.counters {
		if len(m) == 0 {
			continue
		}
		mf := family(n, dto.MetricType_COUNTER)
		for _, k := range sortedKeys(m) {
			mf.Metric = append(mf.Metric, &dto.Metric{Label: labels(n, k), Counter: &dto.Counter{Value: ptr(m[k])}})
		}
	}
	for n, m := range s.gauges {
		if len(m) == 0 {
			continue
		}
		mf := family(n, dto.MetricType_GAUGE)
		for _, k := range sortedKeys(m) {
			mf.Metric = append(mf.Metric, &dto.Metric{Label: labels(n, k), Gauge: &dto.Gauge{Value: ptr(m[k])}})
		}
	}
	if len(s.hists) > 0 {
		mf := family(Durations, dto.MetricType_HISTOGRAM)
		ops := make([]string, 0, len(s.hists))
		for op := range s.hists {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			h := s.hists[op]
			dh := &dto.Histogram{SampleCount: ptr(h.count), SampleSum: ptr(h.sum)}
			for _, ub := range durationBuckets {
				dh.Bucket = append(dh.Bucket, &dto.Bucket{UpperBound: ptr(ub), CumulativeCount: ptr(h.buckets[ub])})
			}
			mf.Metric = append(mf.Metric, &dto.Metric{Label: labels(Durations, key{op: op}), Histogram: dh})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func ptr[T any](v T) *T { return &v }

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
