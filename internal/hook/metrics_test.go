//go:build cgo

package hook

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/metrics"
)

// TestRunsAreCounted: the hook adds its runs to the Prometheus textfile
// like every other run of rbdfence: a fail-closed start, a fail-open start
// and an incoming migration's prepare (of a domain that is not an
// OpenNebula VM: a VM's is checked against its claim in Ceph), each under
// op hook_prepare.
func TestRunsAreCounted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		steps []string
		want  map[string]map[string]float64 // metric -> labels "op,kind" -> value
	}{
		{name: "fail closed", steps: []string{"one-42 prepare begin -"}, want: map[string]map[string]float64{
			metrics.Runs: {"hook_prepare,": 1}, metrics.Errors: {"hook_prepare,ceph": 1}, metrics.LastOK: {"hook_prepare,": 0}, metrics.Images: {"hook_prepare,": 0},
		}},
		{name: "fail open", extra: "fence:\n  fail_open: true\n", steps: []string{"web prepare begin -"}, want: map[string]map[string]float64{
			metrics.Runs: {"hook_prepare,": 1}, metrics.Errors: {"hook_prepare,ceph": 1},
		}},
		{name: "incoming migration", steps: []string{"web migrate begin -", "web prepare begin -"}, want: map[string]map[string]float64{
			metrics.Runs: {"hook_prepare,": 1}, metrics.LastOK: {"hook_prepare,": 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prom := filepath.Join(t.TempDir(), "rbdfence.prom")
			cfg, _ := testConfig(t, tc.extra+"metrics: "+prom+"\n")
			for _, st := range tc.steps {
				inv, err := ParseArgs(strings.Fields(st))
				if err != nil {
					t.Fatal(err)
				}
				_ = Run(context.Background(), inv, Options{ConfigPath: cfg, Stdin: strings.NewReader(domainXML(inv.Domain, true)), Log: NewLogger(io.Discard, false)})
			}
			mfs, err := metrics.Read(prom)
			if err != nil {
				t.Fatalf("no metrics written: %v", err)
			}
			for name, samples := range tc.want {
				for labels, want := range samples {
					op, kind, _ := strings.Cut(labels, ",")
					l := map[string]string{"op": op}
					if kind != "" {
						l["kind"] = kind
					}
					if v, ok := metrics.Value(mfs, name, l); !ok || v != want {
						t.Errorf("%s%v = %v (present %v), want %v", name, l, v, ok, want)
					}
				}
			}
		})
	}
}
