package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/metrics"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

func (e *configError) Outcome() outcome.Kind { return outcome.Usage }

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }
func (l *listFlag) Type() string       { return "string" }

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
	fs.StringVar(&c.configPath, "config", "", "config `FILE` (default $RBDFENCE_CONFIG or "+config.DefaultPath+")")
	fs.StringVar(&c.monHost, "mon-host", "", "Ceph monitors, `ip:port[,ip:port]` (overrides ceph.mon_host)")
	fs.StringVar(&c.user, "id", "", "cephx `USER`, without client. (overrides ceph.user)")
	fs.StringVar(&c.keyring, "keyring", "", "keyring `FILE` (overrides ceph.keyring)")
	fs.StringVar(&c.cephConf, "ceph-conf", "", "ceph.conf `FILE` (overrides ceph.conf)")
	fs.BoolVarP(&c.json, "json", "j", false, "print the result as JSON on stdout")
	fs.BoolVarP(&c.verbose, "verbose", "v", false, "debug logging on stderr")
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

// parseFlags parses a verb's flags. --help (-h) returns a *helpRequest
// (run prints the verb's help on stdout, exit 0); a bad flag is a usage
// error that names it with its dashes and says where the help is.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, a := range args {
		if a == "--" {
			break
		}
		// -vm: the standard library's single-dash form of a long flag.
		if name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "="); len(a) > 2 && a[0] == '-' && a[1] != '-' && fs.Lookup(name) != nil {
			return usagef("%s: %s: long flags take two dashes: --%s (try: rbdfence %s --help)", fs.Name(), a, strings.TrimPrefix(a, "-"), fs.Name())
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &helpRequest{fs}
		}
		return usagef("%s: %s (try: rbdfence %s --help)", fs.Name(), flagError(err), fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q (try: rbdfence %s --help)", fs.Name(), fs.Arg(0), fs.Name())
	}
	return nil
}

// flagError words a flag parse error for an operator.
func flagError(err error) string {
	var iv *flag.InvalidValueError
	switch {
	case errors.As(err, &iv):
		f := iv.GetFlag()
		want := map[string]string{"int": "a whole number", "duration": "a duration like 30s or 2m", "bool": "true or false"}[f.Value.Type()]
		if want == "" {
			return fmt.Sprintf("--%s %q: %v", f.Name, iv.GetValue(), errors.Unwrap(iv))
		}
		return fmt.Sprintf("--%s %q: want %s", f.Name, iv.GetValue(), want)
	}
	return err.Error()
}

// helpRequest is VERB --help: run prints the help of the verb's FlagSet.
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return "help requested" }

func (h *helpRequest) text() string { return verbUsage(h.fs) }

// Outcome: asking for help is not an error.
func (h *helpRequest) Outcome() outcome.Kind { return outcome.OK }

// isHelp reports whether err is a --help request (verbs that answer in
// JSON whatever happens print the help instead).
func isHelp(err error) bool {
	var h *helpRequest
	return errors.As(err, &h)
}

// splitGlobals takes the common flags given before the verb off args:
// "rbdfence --config F check ..." is "rbdfence check ... --config F". A
// -h/--help or --version before the verb ends the scan (it is the last
// of globals). Anything else before the verb is a usage error.
func splitGlobals(args []string) (globals, rest []string, err error) {
	fs := globalFlags()
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		a := args[0]
		if isHelpArg(a) || a == "--version" {
			return append(globals, a), nil, nil
		}
		if a == "--" {
			return globals, args[1:], nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *flag.Flag
		if strings.HasPrefix(a, "--") {
			f = fs.Lookup(name)
		} else if len(name) == 1 {
			f = fs.ShorthandLookup(name)
		}
		if f == nil {
			return nil, nil, usagef("%s before the verb: not a common flag (common flags: --config, --mon-host, --id, --keyring, --ceph-conf, -j/--json, -v/--verbose; a verb's own flags go after it)", a)
		}
		n := 1
		if f.Value.Type() != "bool" && !hasValue {
			if len(args) < 2 {
				return nil, nil, usagef("%s needs a value", a)
			}
			n = 2
		}
		globals, args = append(globals, args[:n]...), args[n:]
	}
	return globals, args, nil
}

// withGlobals puts the common flags given before the verb after the
// verb's own arguments (before a "--").
func withGlobals(args, globals []string) []string {
	if len(globals) == 0 {
		return args
	}
	i := slices.Index(args, "--")
	if i < 0 {
		i = len(args)
	}
	return slices.Concat(args[:i], globals, args[i:])
}

// onedError says what could not be read from oned and what to do. Its
// exit code comes from the one table (internal/outcome): an unknown VM is
// bad input (2), oned out of reach or refusing us is 3.
func onedError(what string, err error) error {
	switch {
	case errors.Is(err, opennebula.ErrNotFound):
		return fmt.Errorf("%s: not found in oned (%w)", what, err)
	case errors.Is(err, opennebula.ErrUnreachable):
		return fmt.Errorf("%s: %w; check that oned runs and opennebula.endpoint", what, err)
	case errors.Is(err, opennebula.ErrAuthentication), errors.Is(err, opennebula.ErrAuthorization):
		return fmt.Errorf("%s: %w; check opennebula.auth_file", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 2, 4, 2, ' ', 0) }

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

// deploy names a deploy by its HISTORY SEQ ("deploy #3"); a claim the
// libvirt hook wrote alone does not know it (-1).
func deploy(seq int) string {
	if seq < 0 {
		return "a deploy of unknown seq"
	}
	return fmt.Sprintf("deploy #%d", seq)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
