//go:build cgo

package hook

import (
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/metrics"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Metric ops of the hook's runs (the CLI's are check, fence, host_<op>).
const (
	metricPrepare = "hook_prepare"
	metricRecord  = "hook_record"
)

// countRun adds one run to the Prometheus textfile (config metrics), as
// every run of rbdfence does. A start that went on only because of
// fence.fail_open counts as an error of its kind: the check was not done.
// A failure to write the file is logged, never fatal.
func (r *runner) countRun(cfg *config.Config, op string, resp *hoststep.Response, err error) {
	if cfg == nil || cfg.Metrics == "" {
		return
	}
	kind := outcome.Of(err)
	if kind == outcome.OK && resp != nil && !resp.OK {
		kind = resp.Kind
	}
	m := metrics.Run{Op: op, Duration: time.Since(r.start), Error: kind.Name(), Refused: kind == outcome.Refused}
	if resp != nil && resp.Report != nil {
		m.Images, m.Fenced = len(resp.Report.Images), resp.Report.Fenced
	}
	if err := metrics.Record(cfg.Metrics, m); err != nil {
		r.log.WithError(err).Warn("metrics file not written")
	}
}
