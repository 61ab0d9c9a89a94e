package metrics

import (
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func TestRecordAccumulatesAndParses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rbdfence.prom")
	runs := []Run{
		{Op: "prestart", Duration: 30 * time.Millisecond, Images: 4, Fenced: 2},
		{Op: "prestart", Duration: 2 * time.Second, Images: 4, Refused: true, Error: "refused"},
		{Op: "hook", Duration: 5 * time.Millisecond, Images: 1},
		{Op: "prestart", Duration: 11 * time.Second, Error: "ceph"},
	}
	for _, r := range runs {
		if err := Record(path, r); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := Read(path)
	if err != nil {
		t.Fatalf("the file must parse with the Prometheus text parser: %v", err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{Runs, map[string]string{"op": "prestart"}, 3},
		{Runs, map[string]string{"op": "hook"}, 1},
		{Images, map[string]string{"op": "prestart"}, 8},
		{Fences, map[string]string{"op": "prestart"}, 2},
		{Refusals, map[string]string{"op": "prestart"}, 1},
		{Errors, map[string]string{"op": "prestart", "kind": "ceph"}, 1},
		{Errors, map[string]string{"op": "prestart", "kind": "refused"}, 1},
		{LastOK, map[string]string{"op": "prestart"}, 0},
		{LastOK, map[string]string{"op": "hook"}, 1},
		{Durations, map[string]string{"op": "prestart"}, 3},
	} {
		got, ok := Value(mfs, tc.name, tc.labels)
		if !ok || got != tc.want {
			t.Errorf("%s%v = %v (found %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	var h *dto.Histogram
	for _, m := range mfs[Durations].GetMetric() {
		if m.GetLabel()[0].GetValue() == "prestart" {
			h = m.GetHistogram()
		}
	}
	if h == nil || h.GetSampleSum() < 13 {
		t.Fatalf("histogram sum: %+v", h)
	}
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 0.05 && b.GetCumulativeCount() != 1 {
			t.Fatalf("0.05s bucket: %d, want 1", b.GetCumulativeCount())
		}
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", st.Mode())
	}
}

func TestRecordConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.prom")
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Record(path, Run{Op: "hook", Duration: time.Millisecond}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	mfs, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := Value(mfs, Runs, map[string]string{"op": "hook"}); v != 20 {
		t.Fatalf("runs = %v, want 20 (no lost update)", v)
	}
}

func TestCorruptFileRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.prom")
	os.WriteFile(path, []byte("garbage{{{\n"), 0o644)
	if err := Record(path, Run{Op: "check"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err != nil {
		t.Fatal(err)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/golden.prom")

// TestRecordGolden pins the file byte for byte (families, order, labels,
// HELP and TYPE lines, histogram buckets), so that how it is written can
// change without node_exporter or a dashboard seeing a difference.
func TestRecordGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rbdfence.prom")
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for i, r := range []Run{
		{Op: "prestart", Duration: 30 * time.Millisecond, Images: 4, Fenced: 2},
		{Op: "prestart", Duration: 2 * time.Second, Images: 4, Refused: true, Error: "refused"},
		{Op: "hook", Duration: 5 * time.Millisecond, Images: 1},
		{Op: "check", Duration: 40 * time.Millisecond, Images: 16},
		{Op: "prestart", Duration: 11 * time.Second, Error: "ceph"},
		{Op: "fence", Duration: 700 * time.Millisecond, Images: 2, Fenced: 1, Error: "failure"},
	} {
		r.At = at.Add(time.Duration(i) * time.Second)
		if err := Record(path, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "golden.prom")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("textfile differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}
