package engine_test

// The world of the model-based test (see model_test.go for the design): one
// VM (42) with one non-shareable RBD image, three hosts, oned's view of the
// VM, the front-end's driver action in flight, libvirt's domain one-42 on
// each host with the hook's migration mark, QEMU instances (Ceph clients)
// and the in-memory Ceph (enginetest.Fake) that the real engine runs on.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/engine/enginetest"
)

const (
	mVM     = 42
	mPool   = "one"
	mWindow = 30 // fence.migration_window, minutes (config default)
	mLease  = 60 * time.Second
)

var (
	mDisk = engine.Image{Pool: mPool, Name: "one-42-disk-0"}
	// mDisk1 is the disk `onevm disk-attach` hot-attaches (hotplug).
	mDisk1 = engine.Image{Pool: mPool, Name: "one-42-disk-1"}
	// mDisk2 is the VM's disk in a second Ceph cluster (clusters: 2).
	mDisk2 = engine.Image{Pool: mPool, Name: "one-42-disk-2"}
	// mOtherDisk is the disk of the other installation's VM 42.
	mOtherDisk = engine.Image{Pool: "other", Name: "one-42-disk-0"}
	// mShared is a shareable disk VM 42 has and VM 43 uses on h1 (fenceHost).
	mShared = engine.Image{Pool: mPool, Name: "one-9", Shareable: true}
	mImgs   = []engine.Image{mDisk}
	// mHosts are the VM's three hosts and, last, the other installation's
	// host (hostOther), which no step of ours runs on.
	mHosts = [4]string{"h1", "h2", "h3", "o1"}
	mBase  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// hostOther indexes the other installation's host in mHosts.
const hostOther = 3

// mStime and mStimeOther are the STIME of our VM 42 and of the other
// installation's VM 42 (engine.Claim.Stime).
const (
	mStime      = int64(1767220000)
	mStimeOther = int64(1767000000)
)

// features are the parts of OpenNebula's, libvirt's and Ceph's behaviour an
// exploration includes; the CI run explores each from the world it needs.
type features struct {
	libvirt  bool // libvirtd on a host stops answering (QEMU runs on) and comes back
	restore  bool // onevm suspend (save), a guest suspending itself to RAM, resume (restore)
	hotplug  bool // onevm disk-attach of a second disk (the front-end's attach and record)
	create   bool // an operator's `virsh create` of a stale copy of the domain
	clusters int  // the VM's disks are in this many Ceph clusters (1 or 2)
	other    bool // another OpenNebula installation's VM 42 shares the claim pool
	// bgRecord: after a deploy, the front-end's record of the new
	// instance runs in the background (internal/frontend/session.go) and
	// may land late: after a premigrate, even after the migration.
	bgRecord bool
	// idleCut: a host can also be cut off while its QEMU is idle (it holds
	// no lock): its clients are then invisible altogether.
	idleCut bool
	// fenceHost: a host cut off is a failed host: OpenNebula's host-error
	// hook runs `rbdfence fence-host` and reschedules its VM; VM 42 also
	// has a shareable disk VM 43 uses on h1.
	fenceHost bool
	// outlive: a live migration outlives the front-end's migrate action
	// (its ssh to the source ends; the job goes on).
	outlive bool
	// feCut: a host is cut off from the front-end only: Ceph and the
	// other host (the migration stream) still reach it (issue 18 item 2,
	// the retry: model-C).
	feCut bool
	// hookOnly: the root's claim was written by the hook alone (the VM
	// started while only the hooks were installed, or after claim reset).
	hookOnly bool
	// legacy: the root's claim was written by an older version (no
	// STIME): a step that knows the VM's STIME reads it as the VM's only
	// on evidence (engine.Claim.BelongsTo), else uses the VM's own object.
	legacy bool
	// restored: oned's database was restored from an older backup (the
	// root's instance runs a deploy oned lost).
	restored bool
	// nat: every host reaches Ceph through one NAT: the clients of each
	// show Ceph mNAT, an address no host has (issue 31 item 1).
	nat bool
	// noSeen: librados on a host may give no address for the step's own
	// client (a fault): the step cannot see the NAT (engine.SeenKnown).
	noSeen bool
}

// imgsOf are the VM's disks in cluster c (the attached disk in cluster 0).
func (w *world) imgsOf(c int) []engine.Image {
	if c == 1 {
		return []engine.Image{mDisk2}
	}
	if w.attached {
		return []engine.Image{mDisk, mDisk1}
	}
	return mImgs
}

// mFile0 is the deployment_time of the model's first deployment file; each
// later one is a second later (engine.Claim.Instance).
const mFile0 = int64(1767225600)

func mIP(h int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(h + 1)}) }

// recordStime is the STIME of oned's HISTORY record seq: a record oned
// makes again after its database was restored (feat.restored: every one
// after #0) has another.
func (w *world) recordStime(seq int) int64 {
	t := int64(1000 + 1000*seq)
	if w.feat.restored && seq > 0 {
		t += 500
	}
	return t
}

// mNAT is the address every host's clients show Ceph with feat.nat.
var mNAT = netip.AddrFrom4([4]byte{10, 0, 0, 200})

// cephIP is the address Ceph sees for host h's clients.
func (w *world) cephIP(h int) netip.Addr {
	if w.feat.nat {
		return mNAT
	}
	return mIP(h)
}

// scope is the scope of host h's records and closes (HostView.Scope): its
// address and the one Ceph sees for its clients.
func (w *world) scope(h int) []netip.Addr {
	if w.feat.nat {
		return []netip.Addr{mIP(h), mNAT}
	}
	return []netip.Addr{mIP(h)}
}

// lcm is oned's state of the VM, as far as the model needs it.
type lcm int

const (
	lcmRunning lcm = iota
	lcmBoot        // a deploy (or resume, retry, recreate) is in flight
	lcmMigrate     // a live migration is in flight
	lcmFailure     // BOOT_FAILURE: the deploy failed
	lcmPoweroff
	lcmDone
	lcmSuspended // SUSPENDED: saved (virsh save) or asleep (pmsuspended)
)

var lcmNames = [...]string{"RUNNING", "BOOT", "MIGRATE", "BOOT_FAILURE", "POWEROFF", "DONE", "SUSPENDED"}

// record is one HISTORY record: deploy SEQ on a host; from is the source
// host when a live migration added it, else -1.
type record struct{ seq, host, from int }

// stage is where the front-end's driver action stands.
type stage int

const (
	stNone         stage = iota
	stPrestart           // deploy: rbdfence prestart (host step "start" on the host)
	stCreate             // deploy: vmm deploy's `virsh create`
	stCreating           // deploy: waiting for libvirt (hooks, QEMU)
	stPremigrate         // migrate: TM premigrate (host step on the source)
	stMigrate            // migrate: vmm migrate's `virsh migrate`
	stMigrating          // migrate: waiting for libvirt
	stPostmigrate        // migrate: TM postmigrate (host step on the destination)
	stFailmigrate        // migrate: TM failmigrate (destination, else source)
	stStalled            // deploy: prestart paused inside its claim transaction
	stRestore            // restore: rbdfence prestart of the restore action
	stRestoring          // restore: vmm restore (`virsh restore`, or dompmwakeup)
	stAttach             // disk-attach: rbdfence attach (host step on the VM's host)
	stAttachOpen         // disk-attach: vmm attach_disk (QEMU opens the disk)
	stAttachRecord       // disk-attach: the front-end records the attached disk's client
)

var stageNames = [...]string{"-", "prestart", "create", "creating", "premigrate", "migrate", "migrating", "postmigrate", "failmigrate", "prestart PAUSED",
	"restore prestart", "restore", "attach", "attach_disk", "attach record"}

// feOp is the driver action in flight (stage stNone: none).
type feOp struct {
	stage stage
	seq   int // the HISTORY SEQ the action runs for
	host  int // deploy: the host; migrate: the destination
	src   int // migrate: the source
	// file is the identity (<one:deployment_time>) of the deployment file
	// oned generated for a deploy action (every deploy action writes a new
	// one); 0 for a migration, which keeps the source domain's XML.
	file int64
}

func (o feOp) migration() bool { return o.stage >= stPremigrate && o.stage <= stFailmigrate }

func (o feOp) deploy() bool {
	return (o.stage >= stPrestart && o.stage <= stCreating) || o.stage == stStalled
}

// phase is where libvirt's domain one-42 stands on one host.
type phase int

const (
	phNone     phase = iota
	phMigBegin       // incoming migration: hook `migrate begin` next
	phPrepare        // hook `prepare begin` next
	phOpen           // QEMU opens the image next
	phIncoming       // incoming migration: opened, waiting for the switchover
	phStarted        // hook `started begin` next
	phRunning        // running
	phRelease        // migrated away: hook `release end` next
	phStalled        // hook `prepare begin` paused inside its claim transaction
)

var phaseNames = [...]string{"-", "migrate-begin", "prepare", "open", "incoming", "started", "running", "release", "prepare PAUSED"}

type dom struct {
	phase phase
	inst  int  // instance index once QEMU opened, else -1
	seq   int  // the deploy it runs for, as far as OpenNebula is concerned
	from  int  // incoming migration: the source host; -1 for a create
	byFE  bool // started by the front-end's driver action (not by hand)
	// ident is the <one:deployment_time> of the domain's XML: its deploy
	// action's file for a create, the source domain's for a migration.
	ident int64
	how   string
	// winOK: at `migrate begin` the claim held an open window from the
	// source to this host (for attributing violations)
	winOK bool
	// asleep: the guest suspended itself to RAM (libvirt pmsuspended)
	asleep bool
}

type hostState struct {
	dom    dom
	mark   bool // the hook's incoming-migration mark for one-42 (internal/hook/mark.go)
	markAt int  // minute it was set
	// markWin is the handover window the mark holds (the hook after issue
	// 11's fix keeps the window `migrate begin` accepted; nil before).
	markWin *engine.Window
	// markUsed: a prepare used the mark (internal/hook/mark.go Prepared)
	markUsed bool
	cut      bool // cut off from Ceph and from the front-end
	// noSeen: librados on the host gives no address for a step's own
	// client (features.noSeen).
	noSeen bool
	// silent: libvirtd does not answer (down, restarting, hung); QEMU runs on
	silent bool
	// feCut: the front-end cannot reach the host (features.feCut); only
	// the migrate action's steps and kvm/migrate's cleanup_host heed it.
	feCut bool
}

// inst is one QEMU process of the VM: one Ceph client.
type inst struct {
	ident int64 // the domain's deployment_time it was started from
	host  int
	addr  engine.Addr
	// addr1 is its client of the hot-attached disk (zero: none), addr2 its
	// client of the disk in the second cluster (zero: one cluster).
	addr1, addr2 engine.Addr
	// foreign: another VM's client (the other installation's VM 42, VM 43)
	// of image disk
	foreign bool
	disk    engine.Image
	seq     int
	running bool // writing; false: incoming migration, open but not writing
	gone    bool // the process has exited
	how     string
	fromMig bool
	byFE    bool
	// lost: its deploy is one oned lost (its database restored from an
	// older backup, newWorldRestoredDB): oned does not know it runs.
	lost  bool
	winOK bool // see dom.winOK
	// fencedBy is the start that blocklisted it, if one did (for
	// attributing a violation; not part of the state).
	fencedBy *stepOut
}

type world struct {
	f *enginetest.Fake // fs[0]
	// fs are the Ceph clusters of the VM's disks (feat.clusters).
	fs    []*enginetest.Fake
	feat  *features
	clock int // minutes since mBase
	// saved is the identity (deployment_time) of the checkpoint a
	// `onevm suspend` wrote: a restore's domain carries it.
	saved int64
	// attached: the VM has the hot-attached disk (oned's view).
	attached bool
	// bgRecord is the front-end's background record of a deploy still to
	// land (feat.bgRecord; nil: none).
	bgRecord *record
	// failed are the hosts fence-host fenced (everything on them, another
	// VM's clients included, is fenced by design).
	failed [3]bool
	hist   []record
	lcm    lcm
	op     feOp
	hosts  [3]hostState
	insts  []inst
	runs   int
	// files counts the deployment files oned generated (not part of the
	// state: a fresh file only needs a value no domain carries yet).
	files  int64
	budget struct{ changes, faults, ticks int }
	// stalled is a step whose process took the claim lease, read the claim
	// and then paused (a stuck Ceph call, a paused process): its lease runs
	// out while it waits; when it resumes it goes on from that read.
	stalled *stall
	// transient, while a step runs
	lastWho  engine.Who
	resuming *stall
}

type stall struct {
	source    string // frontend (prestart) or hook (prepare)
	host, seq int
	file      int64 // the front-end's deployment file (prestart)
	cookie    string
	data      []byte
	version   uint64
}

func (w *world) clone() *world {
	c := *w
	c.fs = make([]*enginetest.Fake, len(w.fs))
	for i, f := range w.fs {
		c.fs[i] = f.Clone()
	}
	c.f = c.fs[0]
	c.hist = append([]record(nil), w.hist...)
	c.insts = append([]inst(nil), w.insts...)
	return &c
}

func (w *world) cur() record { return w.hist[len(w.hist)-1] }

// newFile is oned generating a deployment file for a deploy action: its
// deployment_time (LibVirtDriverKVM.cc:2831-2833 of release-7.4.0).
func (w *world) newFile() int64 {
	w.files++
	return mFile0 + w.files - 1
}

func (w *world) now() time.Time { return mBase.Add(time.Duration(w.clock) * time.Minute) }

func (w *world) markFresh(h int) bool {
	return w.hosts[h].mark && w.clock-w.hosts[h].markAt < mWindow
}

func (w *world) blocklisted(a engine.Addr) bool {
	_, ok := w.f.Blocklisted(a)
	return ok
}

// fencedAnywhere reports whether instance in is blocklisted in any cluster.
func (w *world) fencedAnywhere(in inst) bool {
	if w.blocklisted(in.addr) {
		return true
	}
	if len(w.fs) > 1 {
		if _, ok := w.fs[1].Blocklisted(in.addr2); ok {
			return true
		}
	}
	return false
}

// leaseHeld reports whether the VM's claim lease is held in any cluster.
func (w *world) leaseHeld() bool {
	for c, f := range w.fs {
		if f.LeaseHeld(mPool, w.claimOID(c)) {
			return true
		}
	}
	return false
}

// expireLeases lets every lease run out, in every cluster.
func (w *world) expireLeases() {
	for _, f := range w.fs {
		f.ExpireLeases()
	}
}

// newWorld is VM 42 running deploy #0 on h1, its instance recorded in the
// claim: the steady state every trace starts from (the base features).
func newWorld() *world { return newWorldWith(&baseFeatures) }

// baseFeatures are what TestModel explores from newWorld.
var baseFeatures = features{libvirt: true, restore: true, create: true, clusters: 1}

// newWorldWith is newWorld exploring feat. With feat.other the other
// installation's VM 42 was deployed first (#5 on o1, its instance
// recorded): its claim is in VM 42's object, ours in our VM's own.
func newWorldWith(feat *features) *world {
	w := &world{hist: []record{{0, 0, -1}}, lcm: lcmRunning, feat: feat}
	n := max(feat.clusters, 1)
	for c := 0; c < n; c++ {
		w.fs = append(w.fs, enginetest.NewFake())
	}
	w.f = w.fs[0]
	w.f.CreateImage(mDisk)
	if feat.hotplug {
		w.f.CreateImage(mDisk1)
	}
	if n > 1 {
		w.fs[1].CreateImage(mDisk2)
	}
	if feat.fenceHost {
		// VM 43's client of the shareable disk, on h1: another VM's.
		w.f.CreateImage(mShared)
		a := engine.Addr{IP: mIP(0), Nonce: 4300}
		w.insts = append(w.insts, inst{host: 0, addr: a, seq: 0, running: true, foreign: true, disk: mShared, how: "VM 43"})
		w.f.Attach(mShared, a, true)
	}
	for h := range w.hosts {
		w.hosts[h].dom = dom{inst: -1, from: -1}
	}
	if feat.other {
		w.deployOther(5)
	}
	file := w.newFile()
	for c := range w.fs {
		e, _ := w.engineOn(c, -1, nil)
		who := w.who(0, 0, engine.SourceFrontend)
		if feat.hookOnly {
			who = w.who(0, -1, engine.SourceHook)
		}
		who.Instance = file
		if _, err := e.Start(ctx, who, w.imgsOf(c), false); err != nil {
			panic(err)
		}
	}
	w.hosts[0].dom = dom{phase: phRunning, seq: 0, from: -1, byFE: true, how: "claim", ident: file}
	w.hosts[0].dom.inst = w.open(0, 0, true)
	w.insts[len(w.insts)-1].byFE, w.insts[len(w.insts)-1].how = true, "claim"
	for c := range w.fs {
		e, _ := w.engineOn(c, -1, nil)
		rec := w.who(0, -1, engine.SourceHook)
		rec.Instance = file
		if _, err := e.Record(ctx, rec, w.imgsOf(c), engine.Scope{Kind: engine.ScopeOnHost, HostIPs: w.scope(0)}); err != nil {
			panic(err)
		}
	}
	return w
}

// deployOther is the other installation deploying its VM 42 (deploy seq
// on its host o1) and recording its instance, with its own identity.
func (w *world) deployOther(seq int) {
	for i := range w.insts {
		if w.insts[i].foreign && !w.insts[i].gone {
			w.close(i)
		}
	}
	w.f.CreateImage(mOtherDisk)
	e, _ := w.engineOn(0, -1, nil)
	who := engine.Who{VM: mVM, Seq: seq, Host: mHosts[hostOther], Source: engine.SourceFrontend, Run: "other", Pool: mPool,
		HostIPs: []netip.Addr{mIP(hostOther)}, Stime: w.stimeOf(true),
		Domain: engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}} // its old domain is gone
	if _, err := e.Start(ctx, who, []engine.Image{mOtherDisk}, false); err != nil {
		panic(fmt.Sprintf("the other installation's deploy #%d: %v", seq, err))
	}
	a := engine.Addr{IP: mIP(hostOther), Nonce: uint32(101 + len(w.insts))}
	w.insts = append(w.insts, inst{host: hostOther, addr: a, seq: seq, running: true, foreign: true, disk: mOtherDisk, how: "other installation"})
	w.f.Attach(mOtherDisk, a, true)
	who.Seq = -1
	if _, err := e.Record(ctx, who, []engine.Image{mOtherDisk}, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{mIP(hostOther)}}); err != nil {
		panic(err)
	}
}

// stimeOf is the identity our steps (other: the other installation's)
// pass: the mutant no-identity passes none, as before claims recorded it.
func (w *world) stimeOf(other bool) int64 {
	switch {
	case mutant("no-identity"):
		return 0
	case other:
		return mStimeOther
	}
	return mStime
}

// windowKey is a mark's window as far as the engine can tell it apart: its
// fields, times reduced to "the claim's window was opened at the same time"
// (memoized like claimKey).
func (w *world) windowKey(win *engine.Window) string {
	if win == nil {
		return "-"
	}
	c := w.claim()
	same := c != nil && c.Window != nil && c.Window.Opened.Equal(win.Opened) && c.Window.Run == win.Run
	wk := windowKeyMemo{win, same}
	if k, ok := windowKeys[wk]; ok {
		return k
	}
	raw, _ := json.Marshal(win)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	delete(m, "expires")
	delete(m, "run")
	m["opened"] = same
	out, _ := json.Marshal(m)
	windowKeys[wk] = string(out)
	return string(out)
}

type windowKeyMemo struct {
	win  *engine.Window // a mark's window is never changed once set
	same bool
}

var windowKeys = map[windowKeyMemo]string{}

// open starts a QEMU instance on host h and returns its index: a client of
// each of the VM's disks (in each cluster; the attached disk's too).
func (w *world) open(h, seq int, running bool) int {
	n := uint32(101 + len(w.insts))
	in := inst{host: h, addr: engine.Addr{IP: w.cephIP(h), Nonce: n}, seq: seq, running: running, ident: w.hosts[h].dom.ident}
	if len(w.fs) > 1 {
		in.addr2 = engine.Addr{IP: w.cephIP(h), Nonce: n + 5000}
	}
	if w.attached {
		in.addr1 = engine.Addr{IP: w.cephIP(h), Nonce: n + 9000}
	}
	w.insts = append(w.insts, in)
	if !w.hosts[h].cut {
		w.attachClients(in, running)
	}
	return len(w.insts) - 1
}

// attachClients makes in's clients visible in Ceph (a writer holds the lock).
func (w *world) attachClients(in inst, lock bool) {
	if in.foreign {
		w.f.Attach(in.disk, in.addr, lock)
		return
	}
	w.f.Attach(mDisk, in.addr, lock)
	if in.addr1.Exact() {
		w.f.Attach(mDisk1, in.addr1, lock)
	}
	if in.addr2.Exact() {
		w.fs[1].Attach(mDisk2, in.addr2, lock)
	}
}

// hideClients makes in's clients invisible (gone, or to be re-attached).
func (w *world) hideClients(in inst) {
	w.f.Hide(in.addr)
	if in.addr1.Exact() {
		w.f.Hide(in.addr1)
	}
	if in.addr2.Exact() {
		w.fs[1].Hide(in.addr2)
	}
}

// close ends instance i: its watch and lock go with it.
func (w *world) close(i int) {
	if i < 0 || w.insts[i].gone {
		return
	}
	w.insts[i].gone, w.insts[i].running = true, false
	w.hideClients(w.insts[i])
}

// killDom destroys the domain on h (poweroff, delete, recreate's cleanup);
// libvirt's `release end` hook clears the mark. A domain whose start is
// inside its `prepare begin` hook is not destroyed: libvirtd runs the hook
// synchronously in the domain's start job, without a timeout, and the domain
// is not active yet (no QEMU process), so `virsh destroy` answers "domain is
// not running" and a second `virsh create` of the name "already exists".
func (w *world) killDom(h int) {
	if w.hosts[h].dom.phase == phStalled || w.hosts[h].silent {
		return // libvirtd does not answer: the domain stays
	}
	w.close(w.hosts[h].dom.inst)
	w.hosts[h].dom = dom{inst: -1, from: -1}
	w.hosts[h].mark, w.hosts[h].markWin = false, nil
}

func (w *world) who(h, seq int, source string) engine.Who {
	w.runs++
	w.lastWho = engine.Who{VM: mVM, Seq: seq, Host: mHosts[h], Source: source, Run: fmt.Sprintf("run%d", w.runs), Stime: w.stimeOf(false)}
	who := engine.Who{VM: mVM, Seq: seq, Host: mHosts[h], Source: source, Run: fmt.Sprintf("run%d", w.runs), Pool: mPool,
		HostIPs: []netip.Addr{mIP(h)}, Stime: w.stimeOf(false)}
	if source == engine.SourceFrontend {
		// The front-end names the VM as oned has it: its STIME and its
		// HISTORY records (internal/frontend identify).
		for _, r := range w.hist {
			who.History = append(who.History, engine.Placement{Seq: r.seq, Host: mHosts[r.host], Stime: w.recordStime(r.seq)})
		}
	}
	if w.feat.nat {
		// HostView: the address Ceph sees is no host's own: no identity.
		who.HostIPs, who.Behind = nil, []netip.Addr{mNAT}
	}
	return who
}

// errCrashed is what every Ceph call returns once the step's process died.
var errCrashed = errors.New("model: the process crashed")

// crashCluster kills the step's process before Ceph call number budget
// (counting a batch of Blocklist calls as one call: the engine issues them
// concurrently): that call and every later one have no effect, so a lease
// taken stays held until it expires, as when the process dies.
type crashCluster struct {
	engine.Cluster
	*crashState
}

// crashState is one step's process: its Ceph calls in every cluster count
// towards the one crash point.
type crashState struct {
	budget, calls int
	dead, inBL    bool
}

func (c *crashState) gate(bl bool) error {
	if c.dead {
		return errCrashed
	}
	if !(bl && c.inBL) {
		if c.budget >= 0 && c.calls == c.budget {
			c.dead = true
			return errCrashed
		}
		c.calls++
	}
	c.inBL = bl
	return nil
}

func (c *crashCluster) ImageClients(ctx context.Context, img engine.Image) (engine.Clients, error) {
	if err := c.gate(false); err != nil {
		return engine.Clients{}, err
	}
	return c.Cluster.ImageClients(ctx, img)
}
func (c *crashCluster) Blocklist(ctx context.Context, a engine.Addr, d time.Duration) error {
	if err := c.gate(true); err != nil {
		return err
	}
	if mutant("blocklist-noop") {
		return nil
	}
	return c.Cluster.Blocklist(ctx, a, d)
}
func (c *crashCluster) WaitForLatestOSDMap(ctx context.Context) error {
	if err := c.gate(false); err != nil {
		return err
	}
	return c.Cluster.WaitForLatestOSDMap(ctx)
}
func (c *crashCluster) BreakLock(ctx context.Context, img engine.Image, l engine.Locker) error {
	if err := c.gate(false); err != nil {
		return err
	}
	return c.Cluster.BreakLock(ctx, img, l)
}
func (c *crashCluster) AcquireLease(ctx context.Context, pool, oid, cookie string, d time.Duration) error {
	if err := c.gate(false); err != nil {
		return err
	}
	return c.Cluster.AcquireLease(ctx, pool, oid, cookie, d)
}
func (c *crashCluster) ReleaseLease(ctx context.Context, pool, oid, cookie string) error {
	if err := c.gate(false); err != nil {
		return err
	}
	return c.Cluster.ReleaseLease(ctx, pool, oid, cookie)
}
func (c *crashCluster) ReadObject(ctx context.Context, pool, oid string) ([]byte, uint64, error) {
	if err := c.gate(false); err != nil {
		return nil, 0, err
	}
	return c.Cluster.ReadObject(ctx, pool, oid)
}
func (c *crashCluster) WriteObject(ctx context.Context, pool, oid string, data []byte, version uint64) error {
	if err := c.gate(false); err != nil {
		return err
	}
	return c.Cluster.WriteObject(ctx, pool, oid, data, version)
}

// resumeCluster is the Ceph a paused step sees when it resumes: it holds
// the lease already (as far as it knows) and its first read of the claim
// is the one it made before pausing.
type resumeCluster struct {
	engine.Cluster
	s    *stall
	read bool
}

func (c *resumeCluster) AcquireLease(ctx context.Context, pool, oid, cookie string, d time.Duration) error {
	return nil
}

func (c *resumeCluster) ReadObject(ctx context.Context, pool, oid string) ([]byte, uint64, error) {
	if !c.read {
		c.read = true
		return append([]byte(nil), c.s.data...), c.s.version, nil
	}
	return c.Cluster.ReadObject(ctx, pool, oid)
}

// engine returns an engine over the world's (first) Ceph cluster as a host
// step builds it (fencer.EngineOptions, MissingOK, OnBlocklisted spooling
// the event), whose process dies before Ceph call number crash (-1: never).
func (w *world) engine(crash int, spooled map[engine.Addr]bool) (*engine.Engine, *crashState) {
	return w.engineOn(0, crash, spooled)
}

// engineOn is engine over cluster c.
func (w *world) engineOn(c, crash int, spooled map[engine.Addr]bool) (*engine.Engine, *crashState) {
	st := &crashState{budget: crash}
	return w.engineWith(c, st, spooled), st
}

// engineWith is an engine over cluster c whose process is st.
func (w *world) engineWith(c int, st *crashState, spooled map[engine.Addr]bool) *engine.Engine {
	var base engine.Cluster = w.fs[c]
	if w.resuming != nil && c == 0 {
		base = &resumeCluster{Cluster: w.f, s: w.resuming}
	}
	cc := &crashCluster{Cluster: base, crashState: st}
	e := engine.New(cc, engine.Options{Lease: mLease, MissingOK: true, Concurrency: 1,
		OnBlocklisted: func(image string, c engine.ClientReport) {
			if spooled != nil && !mutant("no-spool") {
				a, err := engine.ParseAddr(c.Address)
				if err == nil {
					spooled[a] = true
				}
			}
		}})
	// The clusters of one step are worked on one after the other: the
	// second cluster's windows open a moment after the first's.
	now := w.now().Add(time.Duration(c) * time.Millisecond)
	engine.SetClockForModel(e, func() time.Time { return now })
	if t := transitionMutant(); t != nil {
		engine.SetTransitionForModel(e, t)
	}
	return e
}

// claim reads the VM's claim in the first cluster (nil when none).
func (w *world) claim() *engine.Claim { return w.claimIn(0) }

// claimIn reads our VM's claim in cluster c, where the engine finds it.
func (w *world) claimIn(c int) *engine.Claim {
	b := w.fs[c].Object(mPool, w.claimOID(c))
	if len(b) == 0 {
		return nil
	}
	var cl engine.Claim
	if err := json.Unmarshal(b, &cl); err != nil {
		panic(err)
	}
	return &cl
}

// claimOID is the object of our VM's claim in cluster c: the VM's, unless it
// holds the other installation's claim (engine's locate).
func (w *world) claimOID(c int) string {
	oid := engine.ClaimObject(mVM)
	st := w.stimeOf(false)
	if st != 0 && w.feat.legacy {
		// The VM's own object, once a step did not take the older
		// version's claim as the VM's and wrote there.
		if own := engine.ClaimObjectOf(mVM, st); len(w.fs[c].Object(mPool, own)) > 0 {
			return own
		}
		return oid
	}
	if st == 0 || !w.feat.other {
		return oid // only another installation's claim takes VM 42's object
	}
	if b := w.fs[c].Object(mPool, oid); len(b) > 0 {
		other, ok := otherClaims[string(b)]
		if !ok {
			var cl engine.Claim
			other = json.Unmarshal(b, &cl) == nil && cl.Stime != 0 && cl.Stime != st
			otherClaims[string(b)] = other
		}
		if other {
			return engine.ClaimObjectOf(mVM, st)
		}
	}
	return oid
}

// otherClaims memoizes claimOID's reading of VM 42's object.
var otherClaims = map[string]bool{}

func (w *world) instName(a engine.Addr) string {
	for i, in := range w.insts {
		switch {
		case in.foreign && in.addr == a:
			return fmt.Sprintf("%s's-q%d@%s", strings.ReplaceAll(in.how, " ", "-"), i+1, mHosts[in.host])
		case in.addr == a:
			return fmt.Sprintf("q%d@%s", i+1, mHosts[in.host])
		case in.addr1 == a:
			return fmt.Sprintf("q%d@%s(disk-1)", i+1, mHosts[in.host])
		case in.addr2 == a:
			return fmt.Sprintf("q%d@%s(cluster-2)", i+1, mHosts[in.host])
		}
	}
	return a.String()
}

// claimString is the claim in one line, instances by name.
func (w *world) claimString() string {
	c := w.claim()
	if c == nil {
		return "none"
	}
	var addrs []string
	for _, a := range c.Addrs {
		addrs = append(addrs, w.instName(a))
	}
	s := fmt.Sprintf("#%d on %s (%s, %s) addrs=[%s] instance=%s", c.Seq, c.Host, c.Source, c.State, strings.Join(addrs, " "), fileName(c.Instance))
	if c.Window != nil {
		open := "open"
		if !w.now().Before(c.Window.Expires) {
			open = "expired"
		}
		s += fmt.Sprintf(" window %s→%s of %s %s", c.Window.Src, c.Window.Dst, fileName(c.Window.Instance), open)
	}
	if w.f.LeaseHeld(mPool, w.claimOID(0)) {
		s += " LEASE HELD"
	}
	if len(w.fs) > 1 {
		if c2 := w.claimIn(1); c2 != nil {
			s += fmt.Sprintf("; cluster 2: #%d on %s (%s)", c2.Seq, c2.Host, c2.State)
			if c2.Window != nil {
				s += fmt.Sprintf(" window %s→%s", c2.Window.Src, c2.Window.Dst)
			}
		}
	}
	return s
}

// fileName names a deployment_time by its deployment file: file1 is the
// first oned generated; "-" for unknown.
func fileName(ident int64) string {
	if ident == 0 {
		return "-"
	}
	return fmt.Sprintf("file%d", ident-mFile0+1)
}

// String is the world in one line for the story.
func (w *world) String() string {
	var b strings.Builder
	cur := w.cur()
	fmt.Fprintf(&b, "oned %s #%d@%s", lcmNames[w.lcm], cur.seq, mHosts[cur.host])
	if w.op.stage != stNone {
		if w.op.deploy() {
			fmt.Fprintf(&b, " [deploy #%d@%s: %s]", w.op.seq, mHosts[w.op.host], stageNames[w.op.stage])
		} else {
			fmt.Fprintf(&b, " [migrate #%d %s→%s: %s]", w.op.seq, mHosts[w.op.src], mHosts[w.op.host], stageNames[w.op.stage])
		}
	}
	for h, hs := range w.hosts {
		fmt.Fprintf(&b, " | %s", mHosts[h])
		if hs.cut {
			b.WriteString("(CUT OFF)")
		}
		if hs.feCut {
			b.WriteString("(NO SSH)")
		}
		if hs.dom.phase != phNone {
			fmt.Fprintf(&b, " one-42(%s) %s", fileName(hs.dom.ident), phaseNames[hs.dom.phase])
		}
		if hs.mark {
			if w.markFresh(h) {
				b.WriteString(" mark")
			} else {
				b.WriteString(" mark(expired)")
			}
		}
	}
	var qs []string
	for i, in := range w.insts {
		if in.gone {
			continue
		}
		s := fmt.Sprintf("q%d@%s #%d", i+1, mHosts[in.host], in.seq)
		switch {
		case w.blocklisted(in.addr):
			s += " FENCED"
		case in.running:
			s += " WRITING"
		default:
			s += " incoming"
		}
		qs = append(qs, s)
	}
	fmt.Fprintf(&b, " | QEMU: %s", strings.Join(qs, ", "))
	return b.String()
}

// key is the world's state as far as anything later can tell: what the
// engine reads (claim, lease, blocklist, clients) and what the harness
// decides on. Times become "expired or not" (the clock only jumps past
// every window and lease at once).
func (w *world) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v|%d|%+v|%+v|", w.hist, w.lcm, w.op, w.budget)
	for h, hs := range w.hosts {
		fmt.Fprintf(&b, "%+v m%v u%v c%v s%v %s;", hs.dom, w.markFresh(h), hs.markUsed, hs.cut, hs.silent, w.windowKey(hs.markWin))
		if hs.feCut {
			b.WriteString("F;")
		}
	}
	for _, in := range w.insts {
		fmt.Fprintf(&b, "%d %s %s %d %v %v %s %v %v %d;", in.host, in.addr, in.addr1, in.seq, in.running, in.gone, in.how, in.fromMig, in.byFE, in.ident)
	}
	fmt.Fprintf(&b, "|%d %v %v", w.saved, w.attached, w.failed)
	if w.bgRecord != nil {
		fmt.Fprintf(&b, " bg%+v", *w.bgRecord)
	}
	oid := w.claimOID(0)
	b.WriteString(w.claimKey(w.f.Object(mPool, oid)))
	if w.feat.other || w.feat.legacy {
		for _, o := range []string{engine.ClaimObject(mVM), engine.ClaimObjectOf(mVM, mStime)} {
			if o != oid {
				b.WriteString("|" + w.claimKey(w.f.Object(mPool, o)))
			}
		}
	}
	if st := w.stalled; st != nil {
		fmt.Fprintf(&b, "|stalled %s %d %d %d stale=%v %s", st.source, st.host, st.seq, st.file, st.version != w.f.ObjectVersion(mPool, oid), w.claimKey(st.data))
	}
	fmt.Fprintf(&b, "|L%v|%s", w.f.LeaseHeld(mPool, oid), w.f.Observable())
	if len(w.fs) > 1 {
		fmt.Fprintf(&b, "|c2 %s L%v %s", w.claimKey(w.fs[1].Object(mPool, w.claimOID(1))), w.fs[1].LeaseHeld(mPool, w.claimOID(1)), w.fs[1].Observable())
	}
	return b.String()
}

// claimKey is a stored claim as far as anything can tell it apart:
// generically (fields added to engine.Claim later count too), without the
// run id and the times, the window's expiry reduced to open or not. The
// same claim bytes recur in many states: keys are memoized by the bytes and
// the clock.
func (w *world) claimKey(raw []byte) string {
	if len(raw) == 0 {
		return "none"
	}
	ck := claimKeyMemo{string(raw), w.clock}
	if k, ok := claimKeys[ck]; ok {
		return k
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(err)
	}
	delete(m, "run")
	delete(m, "updated")
	if win, ok := m["window"].(map[string]any); ok {
		delete(win, "opened")
		delete(win, "run") // marks compare to it (windowKey): only "the same" counts
		var c engine.Claim
		if json.Unmarshal(raw, &c) == nil && c.Window != nil {
			win["expires"] = w.now().Before(c.Window.Expires)
		}
	}
	out, _ := json.Marshal(m) // map keys sorted
	claimKeys[ck] = string(out)
	return string(out)
}

type claimKeyMemo struct {
	raw   string
	clock int
}

// claimKeys memoizes claimKey (the exploration runs in one goroutine).
var claimKeys = map[claimKeyMemo]string{}
