package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/syslog"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/config"

	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/hostversions"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// runHost is the host-side step of the front-end drivers: one JSON request on
// stdin, one JSON response on stdout (always, also on failure).
//
// With --framed both are framed (hoststep.ReadRequestFrame,
// WriteResponseFrame): the request is read without reading ahead, so that
// the remote deploy or restore run after the step in the same ssh session
// gets the rest of stdin, and the front-end tells the response from that
// action's output. With --detached nobody reads the response (the record
// the host runs in the background after a deploy): a failure is appended to
// the audit log and sent to syslog, where an operator finds it.
func runHost(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("host", flag.ContinueOnError)
	var c common
	c.register(fs)
	framed := fs.Bool("framed", false, "framed request and response (one ssh session with the remote action)")
	detached := fs.Bool("detached", false, "nobody reads the response: log a failure to the audit log and syslog")
	minFormat := fs.Int(hoststep.ClaimFormatFlag, 0, "the claim format the front-end needs: a start is refused before anything is fenced when this host step or the hook beside it reads an older one")
	defer func() {
		// Framed, every failure is in the response; a line on stderr would
		// come after the frame, among the remote action's output.
		if *framed && err != nil {
			err = &reportedError{err}
		}
	}()
	var req *hoststep.Request
	write := func(r *hoststep.Response) error {
		body, err := json.Marshal(hoststep.Reply(req, r))
		if err != nil {
			return err
		}
		if *framed {
			return hoststep.WriteResponseFrame(stdout, body)
		}
		_, err = stdout.Write(append(body, '\n'))
		return err
	}
	if err := parseFlags(fs, args); err != nil {
		if isHelp(err) {
			return err
		}
		_ = write(&hoststep.Response{Kind: outcome.Usage, Error: err.Error()})
		return err
	}
	read := hoststep.ReadRequest
	if *framed {
		read = hoststep.ReadRequestFrame
	}
	req, err = read(stdin)
	if err != nil {
		r := &hoststep.Response{Kind: outcome.Usage, Error: err.Error()}
		if req != nil {
			r.Op = req.Op // an incompatible request: the answer names its op
		}
		_ = write(r)
		return outcome.Errorf(outcome.Usage, "%w", err)
	}
	cfg, err := c.load()
	if req.Op == hoststep.OpVersions {
		// What runs here, also when the config is broken (doctor asks).
		resp := &hoststep.Response{OK: true, Op: req.Op, Versions: hostVersions(ctx, cfg, !req.Brief)}
		if err != nil {
			resp.Error = err.Error()
		}
		return write(resp)
	}
	if err != nil {
		_ = write(&hoststep.Response{Op: req.Op, Kind: outcome.Usage, Error: err.Error(), Versions: hostVersions(ctx, nil, false)})
		return err
	}
	start := time.Now()
	ctx, cancel := bounded(ctx, cfg)
	defer cancel()
	versions := hostVersions(ctx, cfg, false)
	if req.Op == hoststep.OpStart && !req.Local {
		// Before anything is fenced: a hook (or this step) that reads an
		// older claim format than the front-end needs would misread the
		// claim this start writes. With opennebula.remote: local the hook
		// beside this step is not the start host's: the front-end asks
		// that host itself.
		if err := hoststep.CheckVersions(req.Host, versions, max(*minFormat, engine.ClaimFormat), true); err != nil {
			resp := &hoststep.Response{Op: req.Op, Kind: outcome.Of(err), Error: err.Error(), Versions: versions}
			if *detached {
				logDetached(cfg, req, resp)
			}
			_ = write(resp)
			return &hostStepError{resp}
		}
	}
	resp := fencer.Do(ctx, cfg, req)
	resp.Versions = versions
	recordMetrics(cfg, nil, "host_"+req.Op, start, resp.Report, resp.Kind)
	// The step spooled its events durably; deliver them (and older ones)
	// when this host can reach oned. The front-end also publishes its copy:
	// ids are the same, oned counts each once.
	_, _ = collision.Publish(ctx, cfg, nil)
	if *detached && (!resp.OK || resp.Error != "") {
		logDetached(cfg, req, resp)
	}
	if err := write(resp); err != nil {
		return err
	}
	if !resp.OK {
		return &hostStepError{resp}
	}
	return nil
}

// hostRoot is the root under which the host step looks for the hook (tests).
var hostRoot = "/"

// hostVersions is what runs on this host: this binary and the hook beside
// it (its answer cached in the state directory), with the packages and
// the platform when full.
func hostVersions(ctx context.Context, cfg *config.Config, full bool) *hoststep.Versions {
	cache := ""
	if cfg != nil {
		cache = cfg.StateDir
	}
	v := &hoststep.Versions{Step: hostversions.Self(version), Hook: hostversions.Hook(ctx, hostRoot, cache)}
	if full {
		v.Packages = hostversions.Packages(ctx)
		v.Platform = hostversions.Platform(ctx, hostRoot)
	}
	return v
}

// reportedError is an error the response already reported: the exit
// code is its kind's, nothing is printed (exitCode).
type reportedError struct{ err error }

func (e *reportedError) Error() string { return e.err.Error() }

func (e *reportedError) Unwrap() error { return e.err }

func (e *reportedError) Outcome() outcome.Kind { return outcome.Of(e.err) }

func (e *reportedError) reported() bool { return true }

type hostStepError struct{ r *hoststep.Response }

func (e *hostStepError) Error() string { return e.r.Error }

func (e *hostStepError) Outcome() outcome.Kind { return e.r.Kind }

// logDetached makes the failure of a step nobody waits for visible: one
// audit record (op, vm, host, run, result error and the reason) and a
// syslog line (tag rbdfence-host) when the host has a syslog.
func logDetached(cfg *config.Config, req *hoststep.Request, resp *hoststep.Response) {
	msg := fmt.Sprintf("VM %d: %s step (run %s, deploy #%d on %s) failed: %s", req.VM, req.Op, req.Run, req.Seq, req.Host, resp.Error)
	rec := audit.Record{Time: time.Now().UTC(), Run: req.Run, Op: req.Op, VM: audit.VMOf(req.VM), Host: req.Host,
		Action: "none", Result: "error", Error: resp.Error}
	if err := audit.Append(cfg.AuditLog, []audit.Record{rec}); err != nil {
		msg += fmt.Sprintf(" (audit log %s not written: %v)", cfg.AuditLog, err)
	}
	if w, err := syslog.New(syslog.LOG_DAEMON|syslog.LOG_ERR, "rbdfence-host"); err == nil {
		_ = w.Err(msg)
		_ = w.Close()
	}
}
