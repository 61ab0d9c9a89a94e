package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/metrics"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

func (e *configError) Outcome() outcome.Kind { return outcome.Usage }

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// common are the flags every Ceph-facing verb takes.
type common struct {
	configPath string
	monHost    string
	user       string
	keyring    string
	cephConf   string
	json       bool
	verbose    bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.configPath, "config", "", "config file (default $RBDFENCE_CONFIG or "+config.DefaultPath+")")
	fs.StringVar(&c.monHost, "mon-host", "", "Ceph monitors, ip:port[,ip:port] (overrides config)")
	fs.StringVar(&c.user, "id", "", "cephx user without client. (overrides config)")
	fs.StringVar(&c.keyring, "keyring", "", "keyring path (overrides config)")
	fs.StringVar(&c.cephConf, "ceph-conf", "", "ceph.conf path (overrides config)")
	fs.BoolVar(&c.json, "json", false, "print the result as JSON on stdout")
	fs.BoolVar(&c.verbose, "v", false, "debug logging on stderr")
}

// load reads the config and applies flag overrides.
func (c *common) load() (*config.Config, error) {
	path := config.Path(c.configPath)
	cfg, err := config.Load(path, c.configPath != "" || path != config.DefaultPath)
	if err != nil {
		return nil, &configError{err}
	}
	if c.monHost != "" {
		cfg.Ceph.MonHost = c.monHost
	}
	if c.user != "" {
		cfg.Ceph.User = strings.TrimPrefix(c.user, "client.")
	}
	if c.keyring != "" {
		cfg.Ceph.Keyring = c.keyring
	}
	if c.cephConf != "" {
		cfg.Ceph.Conf = c.cephConf
	}
	if err := cfg.Validate(); err != nil {
		return nil, &configError{err}
	}
	return cfg, nil
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usagef("%s: %v (try: rbdfence help)", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

func newLogger(stderr io.Writer, cfg *config.Config, verbose bool) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(stderr)
	l.SetFormatter(&logrus.TextFormatter{DisableTimestamp: false, FullTimestamp: true, DisableColors: true})
	lvl, err := logrus.ParseLevel(cfg.LogLevel)
	if err != nil {
		lvl = logrus.InfoLevel
	}
	if verbose {
		lvl = logrus.DebugLevel
	}
	l.SetLevel(lvl)
	return l
}

// recordMetrics adds one run to the configured Prometheus textfile; a
// failure to write it is logged, never fatal.
func recordMetrics(cfg *config.Config, log *logrus.Logger, op string, start time.Time, r *engine.Report, kind outcome.Kind) {
	m := metrics.Run{Op: op, Duration: time.Since(start), Error: kind.Name(), Refused: kind == outcome.Refused}
	if r != nil {
		m.Images, m.Fenced = len(r.Images), r.Fenced
	}
	if err := metrics.Record(cfg.Metrics, m); err != nil && log != nil {
		log.WithError(err).Warn("metrics file not written")
	}
}

// bounded returns ctx limited by the config's total timeout.
func bounded(ctx context.Context, cfg *config.Config) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Total))
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
