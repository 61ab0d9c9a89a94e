//go:build cgo

package hook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/domxml"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Source is the claim and event source of the hook.
const Source = engine.SourceHook

// grace is how long Run waits past timeouts.total for a Ceph call that does
// not return (a librados call stuck in C ignores the context) before it
// gives up on it.
const grace = 3 * time.Second

// Options configure one run of the hook.
type Options struct {
	// ConfigPath is the --config value; "" means $RBDFENCE_CONFIG or
	// config.DefaultPath, where a missing file means built-in defaults.
	ConfigPath string
	// Domains, when set, limits the hook to domains whose name matches;
	// others are left alone as if the hook were not installed.
	Domains *regexp.Regexp
	// Stdin is the domain XML from libvirtd.
	Stdin io.Reader
	// Log receives the run's log lines (see NewLogger).
	Log *logrus.Logger
}

// Error is a failure that must stop libvirt's operation (the start, or the
// incoming migration). Kind gives the exit code.
type Error struct {
	Kind   outcome.Kind
	Domain string
	Action Action
	Err    error
}

func (e *Error) Error() string {
	what := "not starting " + e.Domain
	if e.Action == ActMarkMigration {
		what = "not accepting the incoming migration of " + e.Domain
	}
	return what + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Outcome is the error's kind (internal/outcome).
func (e *Error) Outcome() outcome.Kind { return e.Kind }

// Run performs one hook invocation. It returns nil when libvirt may go on,
// or an *Error. It never writes to stdout.
func Run(ctx context.Context, inv Invocation, o Options) error {
	if o.Log == nil {
		o.Log = NewLogger(io.Discard, false)
	}
	if o.Stdin == nil {
		o.Stdin = strings.NewReader("")
	}
	act := Dispatch(inv)
	if act == ActNone || (o.Domains != nil && !o.Domains.MatchString(inv.Domain)) {
		Drain(o.Stdin, ReadTimeout)
		return nil
	}
	r := &runner{inv: inv, act: act, o: o, run: audit.NewRunID(), start: time.Now()}
	r.log = o.Log.WithFields(logrus.Fields{
		"domain": inv.Domain, "vm": domxml.VMIDFromName(inv.Domain), "op": inv.Op + " " + inv.SubOp, "run": r.run,
	})
	switch act {
	case ActFence:
		return r.prepare(ctx)
	case ActMarkMigration:
		return r.migrate(ctx)
	case ActClearMark:
		r.clear()
		return nil
	case ActRecord:
		return r.record(ctx)
	}
	return nil
}

type runner struct {
	inv   Invocation
	act   Action
	o     Options
	run   string
	start time.Time
	log   *logrus.Entry
}

func (r *runner) fail(kind outcome.Kind, err error) error {
	return &Error{Kind: kind, Domain: r.inv.Domain, Action: r.act, Err: err}
}

// loadConfig reads the configuration as the rbdfence CLI does and applies
// the hook's defaults.
func (r *runner) loadConfig() (*config.Config, error) {
	path := config.Path(r.o.ConfigPath)
	cfg, err := config.Load(path, r.o.ConfigPath != "" || path != config.DefaultPath)
	if err != nil {
		return nil, err
	}
	if cfg.LogLevel == "debug" {
		r.o.Log.SetLevel(logrus.DebugLevel)
	}
	cfg.HostName = cfg.Host()
	r.log = r.log.WithField("host", cfg.HostName)
	return cfg, nil
}

func marks(cfg *config.Config) Marks {
	return Marks{Dir: filepath.Join(cfg.StateDir, MarkDir), Window: time.Duration(cfg.Fence.MigrationWindow)}
}

// domain reads and parses the domain XML on stdin.
func (r *runner) domain() (*domxml.Domain, error) {
	b, err := ReadInput(r.o.Stdin, MaxXML, ReadTimeout)
	if err != nil {
		return nil, err
	}
	dom, err := domxml.Parse(b)
	if err != nil {
		return nil, err
	}
	if dom.Name != r.inv.Domain {
		return nil, fmt.Errorf("the domain XML on stdin is for %q, not %q", dom.Name, r.inv.Domain)
	}
	return dom, nil
}

// prepare is `prepare begin`: claim and fence before QEMU opens the disks.
func (r *runner) prepare(ctx context.Context) (err error) {
	dom, err := r.domain()
	if err != nil {
		return r.fail(outcome.Usage, err)
	}
	if len(dom.Disks) == 0 {
		r.log.Debug("no RBD disks: nothing to do")
		return nil
	}
	cfg, err := r.loadConfig()
	if err != nil {
		return r.fail(outcome.Usage, err)
	}
	var resp *hoststep.Response
	defer func() { r.countRun(cfg, metricPrepare, resp, err) }()
	fresh, mk, err := marks(cfg).Fresh(r.inv.Domain)
	var incoming *engine.Window
	switch {
	case err != nil:
		r.log.WithError(err).Warn("cannot read the incoming-migration mark: fencing as for a start")
	case fresh && !mk.Prepared.IsZero():
		r.log.WithField("marked", mk.Time.Format(time.RFC3339)).Warn("the incoming-migration mark was used by an earlier prepare of this domain: fencing as for a start")
	case fresh:
		// The mark is the handover of this one prepare (Mark.Prepared).
		if err := marks(cfg).Use(mk); err != nil {
			return r.fail(outcome.Failure, fmt.Errorf("cannot record the use of the incoming-migration mark: %w", err))
		}
		if dom.VMID < 0 {
			// Not an OpenNebula VM: no claim, no window to check the mark against.
			r.log.WithField("marked", mk.Time.Format(time.RFC3339)).Info("incoming migration: not fencing (the source runs the domain)")
			return nil
		}
		// A handover only while the claim still holds the window this
		// migration was accepted in; otherwise the engine judges and
		// fences this as a start.
		incoming = mk.Window
		if incoming == nil {
			incoming = &engine.Window{}
		}
	case mk != nil:
		r.log.WithField("marked", mk.Time.Format(time.RFC3339)).Warn("expired incoming-migration mark removed: fencing as for a start")
	}

	ctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Total))
	defer cancel()
	if dom.VMID >= 0 {
		req := &hoststep.Request{Op: hoststep.OpStart, VM: dom.VMID, Seq: -1, Host: cfg.HostName, Source: Source, Run: r.run, Disks: dom.Disks, Incoming: incoming,
			Instance: dom.Instance(), Stime: dom.Stime()}
		if err := req.Validate(); err != nil {
			return r.fail(outcome.Usage, err)
		}
		resp = bounded(ctx, cfg, func(ctx context.Context) *hoststep.Response { return fencer.Do(ctx, cfg, req) })
	} else {
		resp = bounded(ctx, cfg, func(ctx context.Context) *hoststep.Response {
			return fencer.FenceDisks(ctx, cfg, dom.Disks, r.run, cfg.HostName)
		})
	}
	r.logReport(resp)
	if dom.VMID >= 0 {
		r.publish(ctx, cfg, resp)
	}
	if !resp.OK {
		err := errors.New(resp.Error)
		if resp.Kind == outcome.Unavailable {
			if cfg.Fence.FailOpen {
				r.log.WithError(err).Warn("Ceph check impossible; starting anyway because fence.fail_open is true")
				return nil
			}
			err = fmt.Errorf("%s (fail closed: fence.fail_open is false)", resp.Error)
		}
		return r.fail(resp.Kind, err)
	}
	if resp.Error != "" {
		r.log.Warn(resp.Error)
	}
	switch {
	case incoming != nil && resp.Handover:
		r.log.Info("incoming migration: not fencing (the source runs the VM; the claim holds its handover window)")
	case incoming != nil:
		r.log.WithField("marked", mk.Time.Format(time.RFC3339)).Warn("the incoming-migration mark is not the claim's open handover: checked and fenced as a start")
	}
	r.log.WithField("handover", resp.Handover).Debug("start admitted")
	return nil
}

// bounded runs f with ctx and returns its response, or a failure when f has
// not returned grace after ctx ended.
func bounded(ctx context.Context, cfg *config.Config, f func(context.Context) *hoststep.Response) *hoststep.Response {
	done := make(chan *hoststep.Response, 1)
	go func() { done <- f(ctx) }()
	select {
	case resp := <-done:
		return resp
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case resp := <-done:
		return resp
	case <-t.C:
		return &hoststep.Response{Kind: outcome.Failure,
			Error: fmt.Sprintf("Ceph did not answer within timeouts.total (%s): the fence may be incomplete", time.Duration(cfg.Timeouts.Total))}
	}
}

// logReport logs what the engine did. Fences are warnings (a zombie was
// found, something went wrong elsewhere); the rest is quiet.
func (r *runner) logReport(resp *hoststep.Response) {
	if resp.Report == nil {
		return
	}
	logClient := func(image string, c engine.ClientReport) {
		l := r.log.WithFields(logrus.Fields{"image": image, "client": c.Client, "address": c.Address, "action": c.Action, "decision": c.Decision})
		switch {
		case c.Fenced():
			l.WithField("expire", c.Expire.UTC().Format(time.RFC3339)).Warn("fenced a foreign client")
		case c.Action == engine.ActFailed:
			l.WithField("error", c.Error).Error("fence failed")
		default:
			l.Info("client left alone")
		}
	}
	for _, im := range resp.Report.Images {
		for _, c := range im.Clients {
			logClient(im.Image, c)
		}
	}
	for _, c := range resp.Report.Recorded {
		logClient("(recorded address of the previous instance)", c)
	}
}

// publish raises one collision event per fenced client. A host holds no
// oned credentials (docs/SECURITY.md): the events go to the spool (where
// fencer.Do has put them already, each right after its blocklist; the ids
// are the same) and the front-end collects them over ssh (`rbdfence events
// flush` and its timer). Only a host where the admin put credentials at
// opennebula.auth_file delivers directly. Nothing for a clean start.
func (r *runner) publish(ctx context.Context, cfg *config.Config, resp *hoststep.Response) {
	// The same source as fencer.Do's own spooling ("hook/start"), so that an
	// event spooled by the step and the one published here are identical.
	evs := collision.Events(resp.Audit, Source+"/"+resp.Op)
	if len(evs) == 0 {
		return
	}
	res, err := collision.PublishHost(ctx, cfg, evs)
	l := r.log.WithFields(logrus.Fields{"delivered": res.Delivered, "spooled": res.Spooled})
	var deferred *events.DeferredError
	switch {
	case err == nil && res.ForCollection:
		l.Info("collision events spooled in " + cfg.SpoolDir + " for the front-end to collect (rbdfence events flush)")
	case err == nil:
		l.Info("collision events delivered to oned")
	case errors.As(err, &deferred):
		l.WithError(err).Warn("collision events kept in the spool: oned did not take them now")
	default:
		l.WithError(err).Error("collision events could be neither delivered nor spooled; they are in the audit log " + cfg.AuditLog)
	}
}

// migrate is `migrate begin` on the destination of a live migration. An
// OpenNebula VM's migration is accepted only when its claim shows the
// handover the front-end's premigrate opened for the VM's current deploy
// from the claim's host to this one, of the claim's instance (the domain
// XML's deployment_time, engine.AcceptIncoming); anything else (a stale
// copy migrated by libvirt alone, into an open window or not) is refused
// here, before QEMU starts. The accepted window is kept in the domain's
// mark for the prepare that follows.
func (r *runner) migrate(ctx context.Context) error {
	dom, err := r.domain()
	if err != nil {
		return r.fail(outcome.Usage, err)
	}
	if len(dom.Disks) == 0 {
		return nil
	}
	cfg, err := r.loadConfig()
	if err != nil {
		return r.fail(outcome.Usage, err)
	}
	var win *engine.Window
	if dom.VMID >= 0 {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Total))
		defer cancel()
		req := &hoststep.Request{Op: hoststep.OpIncoming, VM: dom.VMID, Seq: -1, Host: cfg.HostName, Source: Source, Run: r.run, Disks: dom.Disks,
			Instance: dom.Instance(), Stime: dom.Stime()}
		if err := req.Validate(); err != nil {
			return r.fail(outcome.Usage, err)
		}
		resp := bounded(ctx, cfg, func(ctx context.Context) *hoststep.Response { return fencer.Do(ctx, cfg, req) })
		switch {
		case resp.OK && resp.Claim != nil && resp.Claim.Window != nil:
			win = resp.Claim.Window
		case resp.OK:
			// No claim to check (no RBD disk on a claimable access).
		case resp.Kind == outcome.Unavailable && cfg.Fence.FailOpen:
			// The mark then holds no window: the prepare that follows is
			// checked (and fenced) as a start.
			r.log.WithError(errors.New(resp.Error)).Warn("Ceph check impossible; accepting the migration because fence.fail_open is true")
		case resp.Kind == outcome.Unavailable:
			return r.fail(resp.Kind, fmt.Errorf("%s (fail closed: fence.fail_open is false)", resp.Error))
		default:
			return r.fail(resp.Kind, errors.New(resp.Error))
		}
	}
	if err := marks(cfg).Set(r.inv.Domain, r.run, win); err != nil {
		// Without the mark the prepare would fence the running source.
		return r.fail(outcome.Failure, err)
	}
	if win != nil {
		r.log.WithFields(logrus.Fields{"src": win.Src, "deploy": win.Seq, "expires": win.Expires.Format(time.RFC3339)}).Info("incoming migration accepted: the claim holds its handover")
	} else {
		r.log.Info("incoming migration marked")
	}
	return nil
}

// clear is `release end` / `stopped end`: the domain is gone from this host.
func (r *runner) clear() {
	Drain(r.o.Stdin, ReadTimeout)
	cfg, err := r.loadConfig()
	if err != nil {
		r.log.WithError(err).Warn("config: cannot clear the incoming-migration mark (it expires on its own)")
		return
	}
	if err := marks(cfg).Clear(r.inv.Domain); err != nil {
		r.log.WithError(err).Warn("cannot clear the incoming-migration mark (it expires on its own)")
	}
}

// record is `started begin`: store the new QEMU's client addresses in the
// VM's claim, so that a later start elsewhere fences this instance even if
// it is cut off from Ceph by then. libvirt runs this hook after QEMU opened
// its images and before it resumes the vCPUs (for an incoming migration,
// before the memory transfer), and stops the domain when it fails. So it
// fails the start when the claim refuses this instance (a newer deploy, or
// another host, claimed the VM after this start's prepare: the newer start
// fenced before this QEMU had opened anything) and, failing closed, when the
// addresses cannot be recorded because Ceph cannot be reached. Any other
// failure is logged.
func (r *runner) record(ctx context.Context) error {
	dom, err := r.domain()
	if err != nil {
		r.log.WithError(err).Warn("cannot record the started instance")
		return nil
	}
	if len(dom.Disks) == 0 {
		return nil
	}
	cfg, err := r.loadConfig()
	if err != nil {
		r.log.WithError(err).Warn("cannot record the started instance")
		return nil
	}
	m := marks(cfg)
	var incoming *engine.Window
	if fresh, mk, err := m.Fresh(r.inv.Domain); err == nil && fresh {
		// The incoming migration's start sequence is over: the mark has done
		// its job. Removing it now keeps a later start of this domain here
		// (after a failed migration whose release hook never came) from
		// skipping the fence. This instance is recorded in the claim's
		// window; the front-end's postmigrate makes it the claim's.
		if err := m.Clear(r.inv.Domain); err != nil {
			r.log.WithError(err).Warn("cannot clear the incoming-migration mark (it expires on its own)")
		}
		if mk.Window == nil {
			r.log.Debug("incoming migration: not recording; mark cleared")
			return nil
		}
		incoming = mk.Window
	}
	if dom.VMID < 0 {
		return nil // no claim for a domain that is not an OpenNebula VM
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Total))
	defer cancel()
	req := &hoststep.Request{Op: hoststep.OpRecord, VM: dom.VMID, Seq: -1, Host: cfg.HostName, Source: Source, Run: r.run, Disks: dom.Disks, Incoming: incoming,
		Instance: dom.Instance(), Stime: dom.Stime()}
	resp := bounded(ctx, cfg, func(ctx context.Context) *hoststep.Response { return fencer.Do(ctx, cfg, req) })
	r.countRun(cfg, metricRecord, resp, nil)
	if !resp.OK {
		switch {
		case resp.Kind == outcome.Refused:
			return r.fail(resp.Kind, fmt.Errorf("the VM's claim no longer admits this instance: %s", resp.Error))
		case resp.Kind == outcome.Unavailable && !cfg.Fence.FailOpen:
			return r.fail(resp.Kind, fmt.Errorf("cannot record this instance's Ceph clients: %s (fail closed: fence.fail_open is false)", resp.Error))
		}
		r.log.WithField("kind", resp.Kind).Warn("cannot record the started instance's addresses in the claim: " + resp.Error)
		return nil
	}
	var addrs []string
	if resp.Claim != nil {
		recorded := resp.Claim.Addrs
		if incoming != nil && resp.Claim.Window != nil {
			recorded = resp.Claim.Window.DstAddrs
		}
		for _, a := range recorded {
			addrs = append(addrs, a.String())
		}
	}
	r.log.WithField("addrs", strings.Join(addrs, ",")).Info("recorded the started instance")
	return nil
}
