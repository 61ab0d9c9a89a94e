package hook

import (
	"io"
	"log/syslog"
	"sync"

	"github.com/sirupsen/logrus"
)

// SyslogTag is the tag of the hook's syslog messages.
const SyslogTag = "rbdfence-hook"

// NewLogger returns the hook's logger: text lines on out at level warning
// (successful runs print nothing; Run lowers the level to debug when the
// config says log_level: debug). Every line also goes to the local syslog
// when there is one: libvirtd keeps a hook's stderr only when the hook
// fails, so a warning of a successful run (a fail-open start, a fenced
// zombie, events left in the spool) would otherwise be lost.
func NewLogger(out io.Writer, useSyslog bool) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(out)
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	l.SetLevel(logrus.WarnLevel)
	if useSyslog {
		l.AddHook(&syslogHook{})
	}
	return l
}

// syslogHook sends entries to syslog, connecting on the first entry (a run
// that logs nothing never dials) and going quiet when there is no syslog.
type syslogHook struct {
	once sync.Once
	w    *syslog.Writer
}

func (h *syslogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *syslogHook) Fire(e *logrus.Entry) error {
	h.once.Do(func() {
		w, err := syslog.New(syslog.LOG_DAEMON|syslog.LOG_WARNING, SyslogTag)
		if err == nil {
			h.w = w
		}
	})
	if h.w == nil {
		return nil
	}
	f := &logrus.TextFormatter{DisableTimestamp: true, DisableColors: true}
	b, err := f.Format(e)
	if err != nil {
		return nil
	}
	msg := string(b)
	// Never return an error: logrus would print it on os.Stderr, which is
	// the one-line error channel to libvirt.
	switch {
	case e.Level <= logrus.ErrorLevel:
		_ = h.w.Err(msg)
	case e.Level == logrus.WarnLevel:
		_ = h.w.Warning(msg)
	case e.Level == logrus.InfoLevel:
		_ = h.w.Info(msg)
	default:
		_ = h.w.Debug(msg)
	}
	return nil
}
