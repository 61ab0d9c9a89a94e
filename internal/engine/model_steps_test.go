package engine_test

// The steps of the model. Each front-end and hook step calls the real
// engine exactly as its main does; the main's own logic around the call
// (the hook's mark, fail-closed on Ceph errors, what a failed step means to
// oned and libvirt) is modelled here, with the file:line it follows.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/engine"
)

// budget classes of steps.
const (
	bChange = "change" // an oned-side change or an operator's action
	bFault  = "fault"
	bTick   = "tick" // time passes
)

type step struct {
	name   string
	budget string
	// crashable steps are also explored with their process dying before
	// each of their Ceph calls (crash >= 0).
	crashable bool
	// stallable steps are also explored with their process pausing inside
	// the claim transaction (crash == crashStall) until a later step.
	stallable bool
	run       func(w *world, o *stepOut, crash int)
}

// crashStall as a step's crash point: the process pauses after taking the
// claim lease and reading the claim.
const crashStall = -2

var (
	errStalled = errors.New("model: the process paused")
	errNoStall = errors.New("model: the lease is held: nothing to pause in")
)

// stepOut is what a step did, for the story and the invariants.
type stepOut struct {
	say     []string
	crashed bool
	stalled bool
	resumed bool // a paused step resuming
	// abandoned: the resumed step's action was given up meanwhile (oned
	// moved on, the domain was destroyed): a stale process.
	abandoned bool
	// stale: the claim changed between the paused step's read and its
	// resumption (another run took the lease and wrote).
	stale bool
	// fence is set by a step that called Start: for whom.
	startSeq, startHost int
	startSource         string
	startFile           int64 // the front-end's deployment file
	// startIncoming: the start was a hook prepare for an incoming migration
	// (startByFE: one the front-end drives).
	startIncoming, startByFE bool
	// fencedNoTrace are clients blocklisted by the step that its result (or,
	// when it crashed, its event spool) does not carry.
	fencedNoTrace []string
	// woken: the restore's start only wakes the sleeping guest.
	woken bool
	// wakeRefused: the restore of a guest asleep on its host was refused.
	wakeRefused bool
	// fencedMidMigration: a close step fenced the destination's copy while
	// the migration job still ran; midMigrationClass attributes it.
	fencedMidMigration bool
	midMigrationClass  string
	// hostFenceMissed: fence-host ended without an error while an
	// instance of the VM on the failed host was not fenced (oned's HA
	// hook reschedules the VM on that word).
	hostFenceMissed []string
}

func (o *stepOut) sayf(format string, a ...any) { o.say = append(o.say, fmt.Sprintf(format, a...)) }

// call runs one engine operation as fencer.Do does (internal/fencer/step.go:
// one engine per cluster of the VM's disks, all in one process whose crash
// point counts every Ceph call; a start or an attach with disks in several
// clusters first checks every cluster's claim (dry) so that a refusal in
// one fences nothing in another; then each cluster in turn, the first
// error ends the step; OnBlocklisted spools the event before the lock
// break, the report becomes audit records and events) and checks that
// every client it blocklisted has an audit record and an event. f gets
// the engine, the cluster and whether this is the dry pass; the result is
// the first cluster's, its report merged over all.
func (w *world) call(o *stepOut, crash int, source, op string, f func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error)) (*engine.ClaimResult, error) {
	oid := w.claimOID(0)
	if crash == crashStall {
		who := w.lastWho
		cookie := fmt.Sprintf("host=%s source=%s run=%s seq=%d", who.Host, who.Source, who.Run, who.Seq)
		if err := w.f.AcquireLease(ctx, mPool, oid, cookie, mLease); err != nil {
			return nil, errNoStall
		}
		data, ver, _ := w.f.ReadObject(ctx, mPool, oid)
		w.stalled = &stall{source: o.startSource, host: o.startHost, seq: o.startSeq, file: o.startFile, cookie: cookie, data: data, version: ver}
		o.stalled = true
		o.sayf("PAUSED after taking the claim lease and reading the claim")
		return nil, errStalled
	}
	if w.resuming != nil {
		// txn releases its lease by its cookie when it returns
		defer w.f.ReleaseLease(ctx, mPool, oid, w.resuming.cookie)
	}
	before := make([]map[engine.Addr]bool, len(w.fs))
	for c, fk := range w.fs {
		before[c] = map[engine.Addr]bool{}
		for _, a := range fk.BlocklistedAddrs() {
			before[c][a] = true
		}
	}
	spooled := map[engine.Addr]bool{}
	st := &crashState{budget: crash}
	var res *engine.ClaimResult
	var err error
	if len(w.fs) > 1 && (op == "prestart" || op == "start" || op == "attach") {
		for c := range w.fs {
			if _, err = f(w.engineWith(c, st, spooled), c, true); err != nil {
				break
			}
		}
	}
	for c := range w.fs {
		if err != nil {
			break
		}
		var r *engine.ClaimResult
		r, err = f(w.engineWith(c, st, spooled), c, false)
		switch {
		case r == nil:
		case res == nil:
			cp := *r
			if r.Report != nil {
				rep := *r.Report
				cp.Report = &rep
			}
			res = &cp
		default:
			res.Handover = res.Handover && r.Handover
			if res.Report == nil {
				res.Report = r.Report
			} else {
				res.Report.Merge(r.Report)
			}
		}
	}
	o.crashed = st.dead
	traced := map[string]bool{}
	if !o.crashed && res != nil && !mutant("no-audit") {
		recs := audit.FromReport(res.Report, audit.Meta{Run: "model", Op: op, VM: audit.VMOf(mVM)}, w.now())
		evs := collision.Events(recs, source+"/"+op)
		inEvents := map[string]bool{}
		for _, ev := range evs {
			inEvents[ev.Address] = true
		}
		for _, r := range recs {
			if inEvents[r.Address] {
				traced[r.Address] = true
			}
		}
	}
	for c, fk := range w.fs {
		for _, a := range fk.BlocklistedAddrs() {
			if before[c][a] {
				continue
			}
			if !spooled[a] || (!o.crashed && !traced[a.String()]) {
				o.fencedNoTrace = append(o.fencedNoTrace, w.instName(a))
			}
			for i := range w.insts {
				in := &w.insts[i]
				if (in.addr == a || in.addr1 == a || in.addr2 == a) && in.fencedBy == nil {
					in.fencedBy = o
				}
			}
		}
	}
	if o.crashed {
		o.sayf("CRASHED before Ceph call %d", crash+1)
		return nil, errCrashed
	}
	if err != nil {
		o.sayf("error: %v", shortErr(err))
	}
	if res != nil && res.Report != nil && res.Report.Fenced > 0 {
		var fenced []string
		for _, im := range res.Report.Images {
			for _, c := range im.Clients {
				if c.Fenced() {
					a, _ := engine.ParseAddr(c.Address)
					fenced = append(fenced, w.instName(a))
				}
			}
		}
		for _, c := range res.Report.Recorded {
			if c.Fenced() {
				a, _ := engine.ParseAddr(c.Address)
				fenced = append(fenced, w.instName(a)+"(recorded)")
			}
		}
		o.sayf("fenced %s", strings.Join(fenced, ", "))
	}
	if res != nil && res.Handover {
		o.sayf("handover: nothing fenced")
	}
	return res, err
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.Index(s, " at 20"); i > 0 {
		if j := strings.Index(s[i+1:], ";"); j > 0 {
			s = s[:i] + s[i+1+j:]
		}
	}
	return s
}

// deployFailed: the deploy action failed; oned sets BOOT_FAILURE.
func (w *world) deployFailed(o *stepOut) {
	w.op = feOp{}
	w.lcm = lcmFailure
	o.sayf("deploy failed: oned BOOT_FAILURE")
}

// migrateReverted is oned's handling of a failed live migration: RUNNING on
// the source under a new HISTORY record copied from the previous one
// (OpenNebula release-7.4.0 src/lcm/LifeCycleStates.cc:80-164,
// cp_previous_history at :141).
func (w *world) migrateReverted(o *stepOut) {
	src := w.op.src
	w.op = feOp{}
	w.lcm = lcmRunning
	seq := w.cur().seq + 1
	before := w.hist[len(w.hist)-2] // the source's record the migration left
	w.hist = append(w.hist, record{seq, src, -1})
	// The source's instance, if it is the VM's, goes on under the new record.
	if d := w.hosts[src].dom; d.phase == phRunning && d.seq == before.seq {
		w.hosts[src].dom.seq = seq
		if d.inst >= 0 {
			w.insts[d.inst].seq = seq
		}
	}
	o.sayf("migration failed: oned RUNNING on %s as #%d", mHosts[src], seq)
}

// fenceHostAndReschedule is OpenNebula's host-error hook with rbdfence's
// fence command (share/hooks/ft/host_error.rb:210-222 of 7.4.0): `fence-host`
// of the VM's failed host (internal/hostfence: the host's own addresses,
// the VM's images, shareable ones included), then the reschedule on the
// next host (a new HISTORY record; the recreate's cleanup cannot reach the
// failed host). The mutant fence-host-widens-scope adds the IPs of the
// addresses the claim records, as fence-host did before issue 18 item 3;
// fence-host-no-placement reads the claim by the VM's STIME alone.
func (w *world) fenceHostAndReschedule(o *stepOut) {
	c := w.cur()
	h := c.host
	ips := []netip.Addr{mIP(h)}
	if mutant("fence-host-widens-scope") {
		for _, a := range w.claim().Recorded() {
			if !slices.Contains(ips, a.IP) {
				ips = append(ips, a.IP)
			}
		}
	}
	if mutant("fence-host-no-placement") {
		// As before d67a2a6: the VM's STIME alone, not oned's placement
		// of it on the failed host; a claim an older version wrote (no
		// STIME) is then not read as this VM's, and (as before issue 31
		// item 2, which makes it refuse, incomplete) read as no claim.
		defer engine.SetHostVMWhoForModel(func(v engine.HostVM, hf engine.HostFence) engine.Who {
			return engine.Who{VM: v.VM, Pool: hf.Pool, Stime: v.Stime}
		})()
		defer engine.SetUnknownAsNoClaimForModel()()
	}
	e, _ := w.engine(-1, nil)
	imgs := append(slices.Clone(w.imgsOf(0)), mShared)
	res := e.FenceHost(ctx, engine.HostFence{Host: mHosts[h], HostIPs: ips, Pool: mPool, Run: "fence-host",
		VMs: []engine.HostVM{{VM: mVM, Seq: c.seq, Stime: w.stimeOf(false), Images: imgs}}})
	var fenced []string
	for _, v := range res.VMs {
		for _, im := range v.Report.Images {
			for _, cl := range im.Clients {
				if cl.Fenced() {
					a, _ := engine.ParseAddr(cl.Address)
					fenced = append(fenced, w.instName(a))
				}
			}
		}
	}
	o.sayf("fence-host %s fenced %s", mHosts[h], strings.Join(fenced, ", "))
	if res.Err() == nil {
		for i, in := range w.insts {
			if !in.foreign && in.host == h && in.running && !in.gone && !w.blocklisted(in.addr) {
				o.hostFenceMissed = append(o.hostFenceMissed, fmt.Sprintf("q%d@%s", i+1, mHosts[h]))
			}
		}
	}
	w.failed[h] = true
	next := (h + 1) % len(w.hosts)
	seq := c.seq + 1
	w.hist = append(w.hist, record{seq, next, -1})
	w.lcm = lcmBoot
	w.op = feOp{stage: stPrestart, seq: seq, host: next, file: w.newFile()}
	o.sayf("HISTORY #%d on %s", seq, mHosts[next])
}

// checkMidMigration notes when a close step fenced the destination's copy
// while OpenNebula's own migration job to dst (the vmm migrate's virsh
// migrate) still runs. An operator's `virsh migrate` outside OpenNebula
// that the open window admits is not counted: a failmigrate after a known
// failure fences it (the close step does not ask libvirt whether another
// job runs; kvm/migrate's cleanup_host destroys the destination's domain
// first, src/vmm_mad/remotes/kvm/migrate:93-97 of release-7.4.0, but an
// operator's job started after that is fenced mid-way).
func (w *world) checkMidMigration(o *stepOut, dst int, class string) {
	d := w.hosts[dst].dom
	switch d.phase {
	case phOpen, phStarted, phIncoming:
		if d.byFE && d.inst >= 0 && d.from >= 0 && w.fencedAnywhere(w.insts[d.inst]) {
			o.fencedMidMigration, o.midMigrationClass = true, class
		}
	}
}

// keepaliveAbort is libvirt's end of a live migration into h when
// libvirtd on h stops answering before the switchover: the connection the
// job is driven over (virsh's, or the source libvirtd's for --p2p) keeps
// alive to h's libvirtd and closes when it misses its answers (keepalive
// interval 5 s, count 5 by default), the source cancels the job and keeps
// running, and the destination's QEMU, its incoming stream cut, exits. A
// job of OpenNebula's migrate action ends in vmm/kvm/migrate's exit 1 (its
// cleanup_host cannot reach h's libvirtd either).
func (w *world) keepaliveAbort(o *stepOut, h int) {
	d := w.hosts[h].dom
	if d.from < 0 {
		return
	}
	switch d.phase {
	case phMigBegin, phPrepare, phOpen, phStarted, phIncoming:
		o.sayf("the migration into %s misses libvirtd's keepalive: aborted", mHosts[h])
		w.abortStart(o, h)
		// libvirt's `release end` once it reaps the domain clears the
		// hook's mark (internal/hook/run.go:316-327).
		w.hosts[h].mark, w.hosts[h].markWin = false, nil
	}
}

// restoreFailed: the restore action failed; oned keeps the VM SUSPENDED.
func (w *world) restoreFailed(o *stepOut) {
	w.op = feOp{}
	w.lcm = lcmSuspended
	o.sayf("restore failed: oned SUSPENDED")
}

// otherSeq is the deploy the other installation's VM 42 runs (-1: none).
func (w *world) otherSeq() int {
	for _, in := range w.insts {
		if in.foreign && !in.gone {
			return in.seq
		}
	}
	return -1
}

// abortStart: libvirt aborts the start of the domain on h (a hook refused,
// the migration broke): the domain is gone, the mark stays (no `release`).
func (w *world) abortStart(o *stepOut, h int) {
	d := w.hosts[h].dom
	w.close(d.inst)
	w.hosts[h].dom = dom{inst: -1, from: -1}
	switch {
	case d.byFE && d.from < 0 && w.op.stage == stCreating && w.op.host == h:
		w.deployFailed(o)
	case d.byFE && d.from >= 0 && w.op.stage == stMigrating && w.op.host == h:
		w.op.stage = stFailmigrate
		o.sayf("virsh migrate failed: failmigrate next")
	default:
		o.sayf("start of one-42 on %s aborted", mHosts[h])
	}
}

// steps returns every step enabled in w within the bound.
func (w *world) steps(b bound) []step {
	var out []step
	add := func(s step) { out = append(out, s) }
	op := w.op

	// ---- the front-end's driver action
	switch op.stage {
	case stPrestart:
		add(step{name: fmt.Sprintf("front-end prestart #%d on %s", op.seq, mHosts[op.host]), crashable: true, stallable: true,
			run: func(w *world, o *stepOut, crash int) {
				err := w.feStart(o, crash, w.op.host, w.op.seq, w.op.file)
				if errors.Is(err, errStalled) {
					w.op.stage = stStalled
					return
				}
				if err != nil {
					w.deployFailed(o)
					return
				}
				w.op.stage = stCreate
			}})
	case stCreate:
		add(step{name: fmt.Sprintf("vmm deploy: virsh create one-42 on %s", mHosts[op.host]),
			run: func(w *world, o *stepOut, _ int) {
				h := w.op.host
				if w.hosts[h].cut {
					o.sayf("host unreachable")
					w.deployFailed(o)
					return
				}
				if w.hosts[h].silent {
					o.sayf("failed to connect to the hypervisor")
					w.deployFailed(o)
					return
				}
				if w.hosts[h].dom.phase != phNone {
					o.sayf("domain already exists")
					w.deployFailed(o)
					return
				}
				w.hosts[h].dom = dom{phase: phPrepare, inst: -1, seq: w.op.seq, from: -1, byFE: true, ident: w.op.file}
				w.op.stage = stCreating
			}})
	case stPremigrate:
		add(step{name: fmt.Sprintf("front-end premigrate #%d %s→%s (on %s)", op.seq, mHosts[op.src], mHosts[op.host], mHosts[op.src]), crashable: true,
			run: func(w *world, o *stepOut, crash int) {
				src, dst := w.op.src, w.op.host
				if w.hosts[src].cut {
					o.sayf("source unreachable")
					w.migrateReverted(o)
					return
				}
				who := w.who(src, w.op.seq, engine.SourceFrontend)
				if w.domainActive(src) && !w.hosts[src].silent {
					// the step reads the source domain's deployment_time
					// from libvirt (internal/fencer/running.go learnInstance)
					who.Instance = w.hosts[src].dom.ident
				}
				if mutant("premigrate-seq+1") {
					who.Seq++
				}
				_, err := w.call(o, crash, engine.SourceFrontend, "premigrate", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
					return e.OpenWindow(ctx, who, mHosts[src], mHosts[dst], time.Duration(mWindow)*time.Minute)
				})
				if err != nil {
					w.migrateReverted(o)
					return
				}
				o.sayf("window open")
				w.op.stage = stMigrate
			}})
	case stMigrate:
		add(step{name: fmt.Sprintf("vmm migrate: virsh migrate one-42 %s→%s", mHosts[op.src], mHosts[op.host]),
			run: func(w *world, o *stepOut, _ int) {
				src, dst := w.op.src, w.op.host
				if w.hosts[src].dom.phase != phRunning || w.hosts[dst].dom.phase != phNone || w.hosts[dst].cut || w.hosts[src].silent || w.hosts[dst].silent {
					o.sayf("virsh migrate failed at once")
					// kvm/migrate's cleanup_host destroys and undefines
					// one-42 on the destination before it exits 1
					// (src/vmm_mad/remotes/kvm/migrate:93-97,305-307 of
					// release-7.4.0): a domain another job is bringing in
					// there is gone with it.
					if w.hosts[dst].dom.phase != phNone && !w.hosts[dst].cut && !w.hosts[dst].feCut {
						w.killDom(dst)
					}
					w.op.stage = stFailmigrate
					return
				}
				// `virsh migrate --live` without --xml: the source domain's
				// XML, its deployment_time with it (opennebula_vm.rb:302-303).
				w.hosts[dst].dom = dom{phase: phMigBegin, inst: -1, seq: w.op.seq, from: src, byFE: true, ident: w.hosts[src].dom.ident}
				w.op.stage = stMigrating
			}})
	case stPostmigrate:
		add(step{name: fmt.Sprintf("front-end postmigrate #%d %s→%s (on %s)", op.seq, mHosts[op.src], mHosts[op.host], mHosts[op.host]), crashable: true,
			run: func(w *world, o *stepOut, crash int) {
				src, dst := w.op.src, w.op.host
				if w.hosts[dst].cut {
					o.sayf("destination unreachable: postmigrate failed (only logged)")
				} else if who, scope, ok := w.closer(o, dst); !ok {
					o.sayf("postmigrate refused: librados on %s gave no own address (only logged)", mHosts[dst])
				} else {
					_, err := w.call(o, crash, engine.SourceFrontend, "postmigrate", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
						return e.CloseWindow(ctx, who, w.imgsOf(c), mHosts[src], mHosts[dst], scope, engine.Migrated)
					})
					if err != nil {
						o.sayf("postmigrate failed (only logged)")
					}
				}
				w.op = feOp{}
				w.lcm = lcmRunning
			}})
	case stFailmigrate:
		add(step{name: fmt.Sprintf("front-end failmigrate #%d %s→%s", op.seq, mHosts[op.src], mHosts[op.host]), crashable: true,
			run: func(w *world, o *stepOut, crash int) {
				src, dst := w.op.src, w.op.host
				// internal/fencer/do.go:131-135: on dst, or on src when dst cannot be reached.
				on, outcome := dst, engine.Failed
				if w.hosts[dst].cut || w.hosts[dst].feCut {
					on, outcome = src, engine.FailedFromSource
				}
				if w.hosts[on].cut {
					o.sayf("unreachable: failmigrate failed")
				} else if who, scope, seen := w.closer(o, on); !seen {
					o.sayf("failmigrate refused: librados on %s gave no own address (the window stays)", mHosts[on])
				} else {
					switch {
					case outcome == engine.FailedFromSource:
						// internal/fencer/running.go jobAnswer: the
						// source's libvirt on one-42 and its job.
						who.Domain = w.sourceJobAnswer(src)
					case mutant("failmigrate-dst-no-job-check"):
						// As before the fix: the destination's
						// failmigrate fenced on nobody's word.
						who.Domain = engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}
					case w.hosts[src].cut || w.hosts[src].feCut:
						// internal/frontend/migratestep.go sourceDomain:
						// the front-end cannot ask the source.
						who.Domain = engine.Domain{Seen: engine.DomainNoAnswer, Said: "did not answer (ssh to the source failed)"}
					default:
						// The front-end's "domain" step on the source
						// (jobAnswer there), relayed to the destination.
						who.Domain = w.sourceJobAnswer(src)
					}
					_, _ = w.call(o, crash, engine.SourceFrontend, "failmigrate", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
						return e.CloseWindow(ctx, who, w.imgsOf(c), mHosts[src], mHosts[dst], scope, outcome)
					})
					// A failmigrate runs after a known failure of the
					// action's own virsh migrate; a job fenced here is an
					// earlier attempt's (recover --retry of a migration whose
					// action was abandoned, the retry failing at once while
					// kvm/migrate's cleanup_host could not reach dst). On
					// either host it is refused unless libvirt on the
					// source says no job runs (model-C on dst, the host
					// came back: mutant failmigrate-dst-no-job-check).
					class := "model-C"
					if outcome == engine.FailedFromSource {
						class = ""
					}
					w.checkMidMigration(o, dst, class)
				}
				w.migrateReverted(o)
			}})
	case stMigrating:
		if w.feat.outlive && w.budget.faults < b.faults {
			// The migrate action loses its ssh to the source (or stops
			// waiting) while `virsh migrate` goes on there (nothing stops it
			// when our ssh is killed): its outcome is unknown. It fences
			// nothing and exits 3 (internal/frontend/migrateaction.go, issue
			// 18 item 2); oned fails the migration back to the source. The
			// mutant action-timeout-fences runs failmigrate then, as the
			// action did on timeouts.action before.
			add(step{name: fmt.Sprintf("FAULT: the migrate action's ssh to %s ends while virsh migrate goes on (outcome unknown)", mHosts[op.src]), budget: bFault,
				run: func(w *world, o *stepOut, _ int) {
					if mutant("action-timeout-fences") {
						src, dst := w.op.src, w.op.host
						who := w.who(dst, w.op.seq, engine.SourceFrontend)
						// The action before issue 18 item 2 also ran that
						// failmigrate without asking the source (which now
						// would refuse it: the job runs).
						who.Domain = engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}
						_, _ = w.call(o, -1, engine.SourceFrontend, "failmigrate", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
							return e.CloseWindow(ctx, who, w.imgsOf(c), mHosts[src], mHosts[dst], w.scope(dst), engine.Failed)
						})
						w.checkMidMigration(o, dst, "")
					} else {
						o.sayf("outcome unknown: nothing fenced, the window stays open")
					}
					w.migrateReverted(o)
				}})
		}
	case stRestore:
		add(step{name: fmt.Sprintf("front-end restore prestart #%d on %s", op.seq, mHosts[op.host]), crashable: true,
			run: func(w *world, o *stepOut, crash int) {
				h := w.op.host
				// The restore's front-end step has no deployment file
				// (internal/frontend/restore.go): identity unknown.
				err := w.feStartAs(o, crash, h, w.op.seq, 0, true)
				if err != nil {
					var held *engine.ClaimHeldError // another run at work: retry later
					if w.hosts[h].dom.asleep && w.domainActive(h) && !w.hosts[h].silent && !w.hosts[h].cut && !errors.Is(err, errCrashed) && !errors.As(err, &held) {
						o.wakeRefused = true
					}
					w.restoreFailed(o)
					return
				}
				w.op.stage = stRestoring
			}})
	case stRestoring:
		add(step{name: fmt.Sprintf("vmm restore on %s", mHosts[op.host]),
			run: func(w *world, o *stepOut, _ int) {
				h := w.op.host
				d := &w.hosts[h].dom
				switch {
				case w.hosts[h].cut || w.hosts[h].silent:
					o.sayf("failed to connect to the hypervisor")
					w.restoreFailed(o)
				case d.asleep && d.phase == phRunning:
					// release-7.4.0 src/vmm_mad/remotes/kvm/restore:61-71
					d.asleep = false
					w.op, w.lcm = feOp{}, lcmRunning
					o.sayf("virsh dompmwakeup: the guest runs again; oned RUNNING")
				case d.phase != phNone:
					o.sayf("domain already exists")
					w.restoreFailed(o)
				default:
					// virsh restore of the checkpoint: its embedded XML
					// (src/vmm_mad/remotes/kvm/restore:79,105)
					w.hosts[h].dom = dom{phase: phPrepare, inst: -1, seq: w.op.seq, from: -1, byFE: true, ident: w.saved}
					w.op.stage = stCreating
				}
			}})
	case stAttach:
		add(step{name: fmt.Sprintf("front-end attach of disk 1 on %s", mHosts[op.host]), crashable: true,
			run: func(w *world, o *stepOut, crash int) {
				h := w.op.host
				if w.hosts[h].cut {
					o.sayf("host step cannot reach Ceph: attach refused")
					w.op = feOp{}
					return
				}
				who := w.who(h, w.op.seq, engine.SourceFrontend)
				_, err := w.call(o, crash, engine.SourceFrontend, "attach", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
					switch {
					case c > 0:
						return nil, nil // the attached disk is in the first cluster
					case dry:
						return e.CheckAttach(ctx, who, []engine.Image{mDisk1})
					}
					return e.Attach(ctx, who, []engine.Image{mDisk1})
				})
				if err != nil {
					o.sayf("attach failed: oned removes the disk")
					w.op = feOp{}
					return
				}
				w.op.stage = stAttachOpen
			}})
	case stAttachOpen:
		add(step{name: fmt.Sprintf("vmm attach_disk: QEMU on %s opens disk 1", mHosts[op.host]),
			run: func(w *world, o *stepOut, _ int) {
				h := w.op.host
				d := w.hosts[h].dom
				if w.hosts[h].cut || w.hosts[h].silent || d.inst < 0 || w.insts[d.inst].gone {
					o.sayf("attach_disk failed")
					w.op = feOp{}
					return
				}
				in := &w.insts[d.inst]
				in.addr1 = engine.Addr{IP: w.cephIP(h), Nonce: in.addr.Nonce + 9000}
				w.f.Attach(mDisk1, in.addr1, in.running)
				w.attached = true
				w.op.stage = stAttachRecord
				o.sayf("q%d opens disk 1", d.inst+1)
			}})
	case stAttachRecord:
		add(step{name: fmt.Sprintf("front-end record of disk 1 on %s", mHosts[op.host]), crashable: true,
			run: func(w *world, o *stepOut, crash int) {
				h := w.op.host
				w.op = feOp{}
				if w.hosts[h].cut {
					o.sayf("not recorded (only logged)")
					return
				}
				// Only the attached disks (internal/frontend/attach.go recordAttached).
				who := w.who(h, w.cur().seq, engine.SourceFrontend)
				_, _ = w.call(o, crash, engine.SourceFrontend, "record", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
					if c > 0 {
						return nil, nil
					}
					return e.Record(ctx, who, []engine.Image{mDisk1}, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: w.scope(h)})
				})
			}})
	}

	// ---- libvirt and the hook on each host
	for h := range w.hosts {
		h := h
		d := w.hosts[h].dom
		if w.hosts[h].silent {
			continue // libvirtd hangs: no domain starts, stops or migrates here
		}
		switch d.phase {
		case phMigBegin:
			add(step{name: fmt.Sprintf("%s hook: migrate begin (incoming from %s)", mHosts[h], mHosts[d.from]),
				run: func(w *world, o *stepOut, _ int) {
					if c := w.claim(); c != nil && c.Window != nil && w.now().Before(c.Window.Expires) &&
						c.Window.Src == mHosts[w.hosts[h].dom.from] && c.Window.Dst == mHosts[h] {
						w.hosts[h].dom.winOK = true
					}
					if err := w.hookMigrateBegin(o, h); err != nil {
						w.abortStart(o, h)
						return
					}
					w.hosts[h].dom.phase = phPrepare
				}})
		case phPrepare:
			add(step{name: fmt.Sprintf("%s hook: prepare begin", mHosts[h]), crashable: true, stallable: true,
				run: func(w *world, o *stepOut, crash int) {
					o.startIncoming, o.startByFE = w.hosts[h].dom.from >= 0, w.hosts[h].dom.byFE
					how, err := w.hookStart(o, crash, h)
					if errors.Is(err, errStalled) {
						w.hosts[h].dom.phase = phStalled
						return
					}
					if err != nil && !mutant("ignore-hook-refusal") {
						w.abortStart(o, h)
						return
					}
					w.hosts[h].dom.how = how
					w.hosts[h].dom.phase = phOpen
				}})
		case phOpen:
			if w.hosts[h].cut {
				break // QEMU cannot reach Ceph: it waits
			}
			add(step{name: fmt.Sprintf("%s QEMU opens the image", mHosts[h]),
				run: func(w *world, o *stepOut, _ int) {
					d := w.hosts[h].dom
					// QEMU opens its images at launch, with its vCPUs
					// paused: the guest writes only after `started begin`
					// (libvirt resumes the vCPUs after that hook, and a
					// failing hook stops the domain).
					i := w.open(h, d.seq, false)
					w.insts[i].how, w.insts[i].fromMig, w.insts[i].byFE, w.insts[i].winOK = d.how, d.from >= 0, d.byFE, d.winOK
					w.hosts[h].dom.inst = i
					// An incoming migration's QEMU is launched with
					// -incoming: `started begin` runs at launch too, before
					// the memory transfer and the switchover.
					w.hosts[h].dom.phase = phStarted
					if d.from < 0 {
						o.sayf("q%d open, vCPUs paused until started", i+1)
					} else {
						o.sayf("q%d open, incoming", i+1)
					}
				}})
		case phIncoming:
			if w.hosts[h].cut {
				break // the destination cannot take the lock: the switchover waits
			}
			add(step{name: fmt.Sprintf("migration switchover %s→%s", mHosts[d.from], mHosts[h]),
				run: func(w *world, o *stepOut, _ int) {
					d := w.hosts[h].dom
					sd := w.hosts[d.from].dom
					if sd.phase != phRunning || sd.inst < 0 || w.insts[sd.inst].gone {
						o.sayf("source domain gone: migration failed")
						w.abortStart(o, h)
						return
					}
					w.close(sd.inst)
					w.hosts[d.from].dom.phase, w.hosts[d.from].dom.inst = phRelease, -1
					in := &w.insts[d.inst]
					in.running = true
					if !w.hosts[h].cut && !w.blocklisted(in.addr) {
						w.hideClients(*in)
						w.attachClients(*in, true)
					}
					w.hosts[h].dom.phase = phRunning
					o.sayf("q%d stops, q%d writes", sd.inst+1, d.inst+1)
					if d.byFE && w.op.stage == stMigrating && w.op.host == h {
						w.op.stage = stPostmigrate
						o.sayf("virsh migrate done: postmigrate next")
					}
				}})
		case phStarted:
			add(step{name: fmt.Sprintf("%s hook: started begin", mHosts[h]), crashable: true,
				run: func(w *world, o *stepOut, crash int) {
					if w.hookRecord(o, crash, h) {
						w.abortStart(o, h) // libvirt stops the domain
						return
					}
					d := w.hosts[h].dom
					if d.from >= 0 {
						w.hosts[h].dom.phase = phIncoming // the switchover comes next
						return
					}
					w.hosts[h].dom.phase = phRunning
					if in := &w.insts[d.inst]; !in.gone {
						in.running = true // libvirt resumes the vCPUs
						if !w.hosts[h].cut && !w.blocklisted(in.addr) {
							w.hideClients(*in)
							w.attachClients(*in, true)
						}
						o.sayf("q%d writes", d.inst+1)
					}
					switch {
					case d.byFE && w.op.stage == stCreating && w.op.host == h:
						if w.feat.bgRecord {
							w.bgRecord = &record{seq: w.op.seq, host: h, from: -1}
						}
						w.op, w.lcm = feOp{}, lcmRunning
						o.sayf("deploy done: oned RUNNING")
					}
				}})
		case phRelease:
			add(step{name: fmt.Sprintf("%s hook: release end", mHosts[h]),
				run: func(w *world, o *stepOut, _ int) {
					w.hosts[h].dom = dom{inst: -1, from: -1}
					w.hosts[h].mark, w.hosts[h].markWin = false, nil // internal/hook/run.go:316-327
				}})
		}
	}

	// ---- the front-end's background record of a deploy lands
	if bg := w.bgRecord; bg != nil {
		add(step{name: fmt.Sprintf("front-end: the background record of deploy #%d on %s lands", bg.seq, mHosts[bg.host]), crashable: true,
			run: func(w *world, o *stepOut, crash int) {
				bg := *w.bgRecord
				w.bgRecord = nil
				if w.hosts[bg.host].cut {
					o.sayf("not recorded (only logged)")
					return
				}
				who := w.who(bg.host, bg.seq, engine.SourceFrontend)
				_, _ = w.call(o, crash, engine.SourceFrontend, "record", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
					return e.Record(ctx, who, w.imgsOf(c), engine.Scope{Kind: engine.ScopeOnHost, HostIPs: w.scope(bg.host)})
				})
			}})
	}

	// ---- a paused step resumes, from the claim it read before pausing
	if st := w.stalled; st != nil {
		what := "front-end prestart"
		if st.source == engine.SourceHook {
			what = "hook prepare"
		}
		add(step{name: fmt.Sprintf("the paused %s on %s resumes", what, mHosts[st.host]),
			run: func(w *world, o *stepOut, _ int) {
				s := w.stalled
				w.stalled, w.resuming = nil, s
				o.resumed = true
				o.stale = s.version != w.f.ObjectVersion(mPool, w.claimOID(0))
				defer func() { w.resuming = nil }()
				if s.source == engine.SourceFrontend {
					err := w.feStart(o, -1, s.host, s.seq, s.file)
					switch {
					case w.op.stage != stStalled || w.op.host != s.host || w.op.seq != s.seq:
						o.abandoned = true
						o.sayf("its driver action was abandoned meanwhile: the result goes nowhere")
					case err != nil:
						w.deployFailed(o)
					default:
						w.op.stage = stCreate
					}
					return
				}
				o.startIncoming, o.startByFE = w.hosts[s.host].dom.from >= 0, w.hosts[s.host].dom.byFE
				how, err := w.hookStart(o, -1, s.host)
				switch {
				case w.hosts[s.host].dom.phase != phStalled:
					o.abandoned = true
					o.sayf("the domain's start was abandoned meanwhile")
				case err != nil:
					w.abortStart(o, s.host)
				default:
					w.hosts[s.host].dom.how = how
					w.hosts[s.host].dom.phase = phOpen
				}
			}})
	}

	// ---- oned-side changes and operators
	if w.lcm != lcmDone && w.budget.changes < b.changes {
		cur := w.cur()
		for h := range w.hosts {
			h := h
			// recover --recreate (or the HA hook's reschedule): oned's
			// cleanup destroys the domain on the old record's host, unless
			// that host cannot be reached (cut off) or the cleanup fails.
			for _, cleanup := range []bool{true, false} {
				cleanup := cleanup
				name := fmt.Sprintf("oned: recover --recreate: new deploy on %s", mHosts[h])
				if !cleanup {
					name += " (the cleanup of the old domain fails)"
				}
				add(step{name: name, budget: bChange,
					run: func(w *world, o *stepOut, _ int) {
						c := w.cur()
						if cleanup && !w.hosts[c.host].cut {
							w.killDom(c.host)
						}
						seq := c.seq + 1
						w.hist = append(w.hist, record{seq, h, -1})
						w.lcm = lcmBoot
						w.op = feOp{stage: stPrestart, seq: seq, host: h, file: w.newFile()}
						o.sayf("HISTORY #%d on %s", seq, mHosts[h])
					}})
			}
			if w.lcm == lcmRunning && op.stage == stNone && h != cur.host {
				add(step{name: fmt.Sprintf("oned: live migrate to %s", mHosts[h]), budget: bChange,
					run: func(w *world, o *stepOut, _ int) {
						c := w.cur()
						seq := c.seq + 1
						w.hist = append(w.hist, record{seq, h, c.host})
						w.lcm = lcmMigrate
						w.op = feOp{stage: stPremigrate, seq: seq, host: h, src: c.host}
						o.sayf("HISTORY #%d on %s", seq, mHosts[h])
					}})
			}
		}
		if op.stage != stNone {
			add(step{name: "oned restarts; recover --success", budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					w.op, w.lcm = feOp{}, lcmRunning
					o.sayf("the driver action is abandoned; oned RUNNING on %s", mHosts[w.cur().host])
				}})
			add(step{name: "oned restarts; recover --failure", budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					switch {
					case w.op.migration():
						w.migrateReverted(o)
					case w.op.stage == stRestore || w.op.stage == stRestoring:
						w.restoreFailed(o)
					case w.op.stage >= stAttach:
						w.op = feOp{} // the attach failed: oned removes the disk
					default:
						w.deployFailed(o)
					}
				}})
		}
		if op.stage != stNone || w.lcm == lcmFailure {
			add(step{name: "oned: recover --retry", budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					c := w.cur()
					switch {
					case w.op.migration():
						w.op = feOp{stage: stPremigrate, seq: w.op.seq, host: w.op.host, src: w.op.src}
						w.lcm = lcmMigrate
						return
					case w.op.stage == stRestore || w.op.stage == stRestoring:
						w.op = feOp{stage: stRestore, seq: w.op.seq, host: w.op.host}
						return
					case w.op.stage >= stAttach:
						w.op = feOp{stage: stAttach, seq: w.op.seq, host: w.op.host}
						return
					}
					w.op = feOp{stage: stPrestart, seq: c.seq, host: c.host, file: w.newFile()}
					w.lcm = lcmBoot
				}})
		}
		if w.lcm == lcmRunning && op.stage == stNone {
			// LifeCycleActions.cc:849-856 (release-7.4.0): resume of a VM in
			// UNKNOWN deploys again under the same HISTORY record.
			add(step{name: "oned: VM UNKNOWN (monitoring lost); onevm resume", budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					c := w.cur()
					w.op = feOp{stage: stPrestart, seq: c.seq, host: c.host, file: w.newFile()}
					w.lcm = lcmBoot
				}})
			add(step{name: "oned: onevm poweroff", budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					c := w.cur()
					if !w.hosts[c.host].cut {
						w.killDom(c.host)
					}
					w.lcm = lcmPoweroff
				}})
		}
		if w.feat.restore && w.lcm == lcmRunning && op.stage == stNone {
			c := cur
			if hs := w.hosts[c.host]; !hs.cut && !hs.silent && hs.dom.phase == phRunning && !hs.dom.asleep {
				add(step{name: "oned: onevm suspend (virsh save: the domain is saved and gone)", budget: bChange,
					run: func(w *world, o *stepOut, _ int) {
						h := w.cur().host
						w.saved = w.hosts[h].dom.ident
						w.killDom(h)
						w.lcm = lcmSuspended
					}})
				add(step{name: "the guest suspends itself to RAM (libvirt pmsuspended; oned SUSPENDED)", budget: bChange,
					run: func(w *world, o *stepOut, _ int) {
						w.hosts[w.cur().host].dom.asleep = true
						w.lcm = lcmSuspended
					}})
			}
		}
		if w.lcm == lcmSuspended && op.stage == stNone {
			// A resume of a SUSPENDED VM restores it under the same
			// HISTORY record (LifeCycleActions.cc restore).
			add(step{name: "oned: onevm resume (from SUSPENDED): restore", budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					c := w.cur()
					w.op = feOp{stage: stRestore, seq: c.seq, host: c.host}
					w.lcm = lcmBoot
				}})
		}
		if w.feat.hotplug && w.lcm == lcmRunning && op.stage == stNone && !w.attached {
			add(step{name: "oned: onevm disk-attach (disk 1)", budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					c := w.cur()
					w.op = feOp{stage: stAttach, seq: c.seq, host: c.host}
				}})
		}
		if c := w.cur(); w.feat.fenceHost && w.hosts[c.host].cut && w.op.stage == stNone {
			add(step{name: fmt.Sprintf("HA: %s failed; the host-error hook runs fence-host %s, then oned reschedules the VM", mHosts[c.host], mHosts[c.host]), budget: bChange,
				run: func(w *world, o *stepOut, _ int) { w.fenceHostAndReschedule(o) }})
		}
		if w.feat.other && w.otherSeq() == 5 {
			add(step{name: "other installation: its VM 42 redeployed on o1 (deploy #6)", budget: bChange,
				run: func(w *world, o *stepOut, _ int) { w.deployOther(6) }})
		}
		if w.lcm == lcmPoweroff {
			// LifeCycleActions.cc:858-878: resume from POWEROFF copies the
			// HISTORY record (a new SEQ on the same host) and deploys.
			add(step{name: "oned: onevm resume (from POWEROFF)", budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					c := w.cur()
					seq := c.seq + 1
					w.hist = append(w.hist, record{seq, c.host, -1})
					w.op = feOp{stage: stPrestart, seq: seq, host: c.host, file: w.newFile()}
					w.lcm = lcmBoot
					o.sayf("HISTORY #%d on %s", seq, mHosts[c.host])
				}})
		}
		add(step{name: "oned: onevm terminate --hard", budget: bChange,
			run: func(w *world, o *stepOut, _ int) {
				c := w.cur()
				if !w.hosts[c.host].cut {
					w.killDom(c.host)
				}
				w.op, w.lcm = feOp{}, lcmDone
			}})
		// An operator or evacuation script migrates a domain with libvirt
		// alone (issue 11 item 1).
		for x := range w.hosts {
			if w.hosts[x].dom.phase != phRunning {
				continue
			}
			for y := range w.hosts {
				if y == x || w.hosts[y].dom.phase != phNone {
					continue
				}
				x, y := x, y
				add(step{name: fmt.Sprintf("operator: virsh migrate --live one-42 %s→%s (outside OpenNebula)", mHosts[x], mHosts[y]), budget: bChange,
					run: func(w *world, o *stepOut, _ int) {
						w.hosts[y].dom = dom{phase: phMigBegin, inst: -1, seq: w.hosts[x].dom.seq, from: x, ident: w.hosts[x].dom.ident}
					}})
			}
		}
	}

	// An operator's `virsh create` of a stale copy of the VM's first
	// deployment file (or an evacuation script's), outside OpenNebula: also
	// once oned has terminated the VM (its domain XML outlives it).
	if w.feat.create && w.budget.changes < b.changes {
		for y := range w.hosts {
			if w.hosts[y].dom.phase != phNone || w.hosts[y].cut || w.hosts[y].silent {
				continue
			}
			y := y
			add(step{name: fmt.Sprintf("operator: virsh create of a stale one-42 (file1) on %s", mHosts[y]), budget: bChange,
				run: func(w *world, o *stepOut, _ int) {
					w.hosts[y].dom = dom{phase: phPrepare, inst: -1, seq: 0, from: -1, ident: mFile0}
				}})
		}
	}

	// ---- faults and healing
	for h := range w.hosts {
		h := h
		if w.feat.libvirt && !w.hosts[h].silent && w.budget.faults < b.faults {
			add(step{name: fmt.Sprintf("FAULT: libvirtd on %s stops answering (QEMU runs on; oned: host ERROR, VMs UNKNOWN)", mHosts[h]), budget: bFault,
				run: func(w *world, o *stepOut, _ int) {
					w.hosts[h].silent = true
					w.keepaliveAbort(o, h)
				}})
		}
		if w.feat.idleCut && !w.hosts[h].cut && w.budget.faults < b.faults {
			add(step{name: fmt.Sprintf("FAULT: %s cut off from Ceph and the front-end, its QEMU idle (no lock held)", mHosts[h]), budget: bFault,
				run: func(w *world, o *stepOut, _ int) {
					w.hosts[h].cut = true
					for _, in := range w.insts {
						if in.host == h && !in.gone {
							w.hideClients(in)
						}
					}
				}})
		}
		if w.feat.noSeen && !w.hosts[h].noSeen && w.budget.faults < b.faults {
			add(step{name: fmt.Sprintf("FAULT: librados on %s gives no address for its steps' own client", mHosts[h]), budget: bFault,
				run: func(w *world, o *stepOut, _ int) { w.hosts[h].noSeen = true }})
		}
		if w.hosts[h].noSeen {
			add(step{name: fmt.Sprintf("%s: librados gives its client's address again", mHosts[h]),
				run: func(w *world, o *stepOut, _ int) { w.hosts[h].noSeen = false }})
		}
		if w.feat.feCut && !w.hosts[h].feCut && !w.hosts[h].cut && w.budget.faults < b.faults {
			add(step{name: fmt.Sprintf("FAULT: %s cut off from the front-end only (Ceph and the migration stream reach it)", mHosts[h]), budget: bFault,
				run: func(w *world, o *stepOut, _ int) { w.hosts[h].feCut = true }})
		}
		if w.hosts[h].feCut {
			add(step{name: fmt.Sprintf("%s: the front-end reaches it again", mHosts[h]),
				run: func(w *world, o *stepOut, _ int) { w.hosts[h].feCut = false }})
		}
		if w.hosts[h].silent {
			add(step{name: fmt.Sprintf("%s: libvirtd answers again", mHosts[h]),
				run: func(w *world, o *stepOut, _ int) { w.hosts[h].silent = false }})
		}
		if !w.hosts[h].cut && w.budget.faults < b.faults {
			add(step{name: fmt.Sprintf("FAULT: %s cut off from Ceph and the front-end", mHosts[h]), budget: bFault,
				run: func(w *world, o *stepOut, _ int) {
					// Its clients' watches time out; a lock stays recorded
					// in the image header until broken.
					w.hosts[h].cut = true
					for _, in := range w.insts {
						if in.host == h && !in.gone {
							w.f.Unwatch(in.addr)
							if in.addr1.Exact() {
								w.f.Unwatch(in.addr1)
							}
							if in.addr2.Exact() {
								w.fs[1].Unwatch(in.addr2)
							}
						}
					}
				}})
		}
		if w.hosts[h].cut {
			add(step{name: fmt.Sprintf("%s comes back", mHosts[h]),
				run: func(w *world, o *stepOut, _ int) { w.reconnect(h) }})
		}
	}
	if w.leaseHeld() {
		add(step{name: "the claim lease runs out (its holder died or is paused)",
			run: func(w *world, o *stepOut, _ int) { w.expireLeases() }})
	}
	if w.budget.ticks < b.ticks && w.somethingExpires() {
		add(step{name: fmt.Sprintf("%d minutes pass (windows, marks and leases run out)", mWindow+1), budget: bTick,
			run: func(w *world, o *stepOut, _ int) { w.tick() }})
	}
	return out
}

func (w *world) tick() {
	w.clock += mWindow + 1
	w.expireLeases()
}

func (w *world) somethingExpires() bool {
	for h := range w.hosts {
		if w.markFresh(h) {
			return true
		}
	}
	if c := w.claim(); c != nil && c.Window != nil && w.now().Before(c.Window.Expires) {
		return true
	}
	return w.leaseHeld()
}

// reconnect: host h reaches Ceph again; its QEMU clients come back unless
// they were blocklisted meanwhile.
func (w *world) reconnect(h int) {
	w.hosts[h].cut = false
	for _, in := range w.insts {
		if in.host == h && !in.gone && !w.fencedAnywhere(in) {
			w.attachClients(in, false) // the watch; a lock it held stayed
		}
	}
}

// closer is the Who and scope of a close step (postmigrate, failmigrate) on
// host h, as internal/fencer builds them from the host's interfaces and the
// address librados gives for the step's own client, and whether the close
// may run there (engine.SeenKnown). Without that address (the host's
// noSeen fault) the step refuses; the mutant seen-unknown-closes closes on
// the interfaces alone: no identity, nothing behind, its own address the
// whole scope (fencer hostView with no Seen).
func (w *world) closer(o *stepOut, h int) (engine.Who, []netip.Addr, bool) {
	who := w.who(h, w.op.seq, engine.SourceFrontend)
	if !w.hosts[h].noSeen {
		return who, w.scope(h), true
	}
	if engine.SeenKnown(true, nil) != nil && !mutant("seen-unknown-closes") {
		return who, nil, false
	}
	view := engine.HostView{Own: []netip.Addr{mIP(h)}}
	who.HostIPs, who.Behind = view.Identity(), view.Behind()
	return who, view.Scope(), true
}
