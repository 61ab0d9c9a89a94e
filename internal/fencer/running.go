//go:build cgo

package fencer

import (
	"context"
	"strconv"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/domstate"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// domainAnswer asks libvirt, for the front-end's start step on the VM's
// host, what the VM's domain is there (read-only, within
// timeouts.connect): the engine admits a start of the claim's own deploy
// on the claim's own host, and fences its recorded instance, only when
// libvirt said the domain is absent or shut off (`onevm resume` of a VM in
// UNKNOWN while libvirtd restarts or hangs and QEMU runs on). Every error
// or timeout, and a step that does not run on the host (opennebula.remote:
// local), is no answer. Only the host step asks libvirt (the libvirt hook
// never does: libvirtd waits for it, and starts the domain itself). A
// failmigrate on the source asks its libvirt for the domain's job
// (jobAnswer); one on the destination takes the source's answer the
// front-end relays (hoststep.Request.SrcDomain). Other steps are not
// asked.
func domainAnswer(ctx context.Context, cfg *config.Config, req *hoststep.Request) engine.Domain {
	if failmigrateFromSource(req) {
		return jobAnswer(ctx, cfg, req)
	}
	if req.Op == hoststep.OpFailmigrate {
		// On the destination: the source's answer, as the front-end
		// relays it (its "domain" step there); none: not asked.
		if req.SrcDomain == nil {
			return engine.Domain{Seen: engine.DomainUnasked}
		}
		return *req.SrcDomain
	}
	if req.Op != hoststep.OpStart || req.Source != engine.SourceFrontend {
		return engine.Domain{}
	}
	if req.Local {
		return engine.Domain{Seen: engine.DomainNoAnswer, Said: "was not asked: opennebula.remote is local, the step runs on the front-end"}
	}
	return answerOf(domstate.Query(ctx, "one-"+strconv.Itoa(req.VM), time.Duration(cfg.Timeouts.Connect)))
}

// answerOf maps virsh domstate's answer to what the engine decides on.
func answerOf(st domstate.State, err error) engine.Domain {
	switch {
	case err != nil:
		return engine.Domain{Seen: engine.DomainNoAnswer, Said: "did not answer (" + err.Error() + ")"}
	case st == "":
		return engine.Domain{Seen: engine.DomainAbsent, Said: "has no such domain"}
	case st == domstate.PMSuspended:
		return engine.Domain{Seen: engine.DomainAsleep, Said: string(st)}
	case !st.Active():
		return engine.Domain{Seen: engine.DomainAbsent, Said: string(st)}
	}
	return engine.Domain{Seen: engine.DomainActive, Said: string(st)}
}

// failmigrateFromSource reports whether req is the front-end's failmigrate
// run on the source because the destination cannot be reached
// (engine.FailedFromSource: every client that is not on the source is
// fenced).
func failmigrateFromSource(req *hoststep.Request) bool {
	return req.Op == hoststep.OpFailmigrate && req.Source == engine.SourceFrontend && req.Host == req.Src && req.Src != req.Dst
}

// domainStep answers the front-end's "domain" step (hoststep.OpDomain) on
// a migration's source: jobAnswer, nothing else (no Ceph, no claim).
func domainStep(ctx context.Context, cfg *config.Config, req *hoststep.Request) *hoststep.Response {
	d := jobAnswer(ctx, cfg, req)
	return &hoststep.Response{OK: true, Op: req.Op, Domain: &d}
}

// jobAnswer asks libvirt on the source, for a failmigrate from the source
// (and for the front-end's "domain" step there before a failmigrate on
// the destination),
// what `one-<VM>` is there and, when it is active, whether a job of it
// runs (`virsh --readonly domjobinfo`, read-only, each within
// timeouts.connect): the engine fences the clients off the source only
// when the domain runs there and no migration job of it does (a retried
// migration's failmigrate while the abandoned first attempt's virsh
// migrate may still complete onto the destination). opennebula.remote:
// local is no answer.
func jobAnswer(ctx context.Context, cfg *config.Config, req *hoststep.Request) engine.Domain {
	if req.Local {
		return engine.Domain{Seen: engine.DomainNoAnswer, Said: "was not asked: opennebula.remote is local, the step runs on the front-end"}
	}
	name := "one-" + strconv.Itoa(req.VM)
	d := answerOf(domstate.Query(ctx, name, time.Duration(cfg.Timeouts.Connect)))
	if d.Seen != engine.DomainActive && d.Seen != engine.DomainAsleep {
		return d
	}
	d.Seen = engine.DomainActive // a guest asleep is active: its QEMU runs
	j, err := domstate.QueryJob(ctx, name, time.Duration(cfg.Timeouts.Connect))
	return jobOf(d, j, err)
}

// jobOf adds virsh domjobinfo's answer to d (libvirt's answer that the
// domain is active).
func jobOf(d engine.Domain, j domstate.Job, err error) engine.Domain {
	switch {
	case err != nil:
		d.Job, d.JobSaid = engine.JobNoAnswer, err.Error()
	case j.Type == "":
		d.Job, d.JobSaid = engine.JobNoAnswer, "the domain was gone when asked for its job"
	case j.Idle():
		d.Job, d.JobSaid = engine.JobNone, j.String()
	default:
		d.Job, d.JobSaid = engine.JobRunning, j.String()
	}
	return d
}

// learnInstance gives the front-end's premigrate, run on the source host,
// the identity of the domain it is about to migrate: the `<one:deployment_time>`
// of `one-<VM>`'s live XML as libvirt has it (read-only, within
// timeouts.connect). OpenWindow uses it when the claim does not know its
// instance's identity (a VM started before this version): the window is
// then bound to it as well. When the step does not run on the source
// (opennebula.remote: local) or libvirt cannot be asked, the request is
// left as it is.
func learnInstance(ctx context.Context, cfg *config.Config, req *hoststep.Request) {
	if req.Op != hoststep.OpPremigrate || req.Source != engine.SourceFrontend || req.Local || req.Instance != 0 || req.Host != req.Src {
		return
	}
	if t, err := domstate.Instance(ctx, "one-"+strconv.Itoa(req.VM), time.Duration(cfg.Timeouts.Connect)); err == nil {
		req.Instance = t
	}
}
