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
	mDisk  = engine.Image{Pool: mPool, Name: "one-42-disk-0"}
	mImgs  = []engine.Image{mDisk}
	mHosts = [3]string{"h1", "h2", "h3"}
	mBase  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// mFile0 is the deployment_time of the model's first deployment file; each
// later one is a second later (engine.Claim.Instance).
const mFile0 = int64(1767225600)

func mIP(h int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(h + 1)}) }

// lcm is oned's state of the VM, as far as the model needs it.
type lcm int

const (
	lcmRunning lcm = iota
	lcmBoot        // a deploy (or resume, retry, recreate) is in flight
	lcmMigrate     // a live migration is in flight
	lcmFailure     // BOOT_FAILURE: the deploy failed
	lcmPoweroff
	lcmDone
)

var lcmNames = [...]string{"RUNNING", "BOOT", "MIGRATE", "BOOT_FAILURE", "POWEROFF", "DONE"}

// record is one HISTORY record: deploy SEQ on a host; from is the source
// host when a live migration added it, else -1.
type record struct{ seq, host, from int }

// stage is where the front-end's driver action stands.
type stage int

const (
	stNone        stage = iota
	stPrestart          // deploy: rbdfence prestart (host step "start" on the host)
	stCreate            // deploy: vmm deploy's `virsh create`
	stCreating          // deploy: waiting for libvirt (hooks, QEMU)
	stPremigrate        // migrate: TM premigrate (host step on the source)
	stMigrate           // migrate: vmm migrate's `virsh migrate`
	stMigrating         // migrate: waiting for libvirt
	stPostmigrate       // migrate: TM postmigrate (host step on the destination)
	stFailmigrate       // migrate: TM failmigrate (destination, else source)
	stStalled           // deploy: prestart paused inside its claim transaction
)

var stageNames = [...]string{"-", "prestart", "create", "creating", "premigrate", "migrate", "migrating", "postmigrate", "failmigrate", "prestart PAUSED"}

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
}

type hostState struct {
	dom    dom
	mark   bool // the hook's incoming-migration mark for one-42 (internal/hook/mark.go)
	markAt int  // minute it was set
	// markWin is the handover window the mark holds (the hook after issue
	// 11's fix keeps the window `migrate begin` accepted; nil before).
	markWin *engine.Window
	cut     bool // cut off from Ceph and from the front-end
}

// inst is one QEMU process of the VM: one Ceph client.
type inst struct {
	ident   int64 // the domain's deployment_time it was started from
	host    int
	addr    engine.Addr
	seq     int
	running bool // writing; false: incoming migration, open but not writing
	gone    bool // the process has exited
	how     string
	fromMig bool
	byFE    bool
	winOK   bool // see dom.winOK
	// fencedBy is the start that blocklisted it, if one did (for
	// attributing a violation; not part of the state).
	fencedBy *stepOut
}

type world struct {
	f     *enginetest.Fake
	clock int // minutes since mBase
	hist  []record
	lcm   lcm
	op    feOp
	hosts [3]hostState
	insts []inst
	runs  int
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
	c.f = w.f.Clone()
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

// newWorld is VM 42 running deploy #0 on h1, its instance recorded in the
// claim: the steady state every trace starts from.
func newWorld() *world {
	w := &world{f: enginetest.NewFake(), hist: []record{{0, 0, -1}}, lcm: lcmRunning}
	w.f.CreateImage(mDisk)
	for h := range w.hosts {
		w.hosts[h].dom = dom{inst: -1, from: -1}
	}
	e, _ := w.engine(-1, nil)
	file := w.newFile()
	who := w.who(0, 0, engine.SourceFrontend)
	who.Instance = file
	if _, err := e.Start(ctx, who, mImgs, false); err != nil {
		panic(err)
	}
	w.hosts[0].dom = dom{phase: phRunning, seq: 0, from: -1, byFE: true, how: "claim", ident: file}
	w.hosts[0].dom.inst = w.open(0, 0, true)
	w.insts[0].byFE, w.insts[0].how = true, "claim"
	rec := w.who(0, -1, engine.SourceHook)
	rec.Instance = file
	if _, err := e.Record(ctx, rec, mImgs, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{mIP(0)}}); err != nil {
		panic(err)
	}
	return w
}

// windowKey is a mark's window as far as the engine can tell it apart: its
// fields, times reduced to "the claim's window was opened at the same time".
func (w *world) windowKey(win *engine.Window) string {
	if win == nil {
		return "-"
	}
	raw, _ := json.Marshal(win)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	delete(m, "expires")
	c := w.claim()
	m["opened"] = c != nil && c.Window != nil && c.Window.Opened.Equal(win.Opened)
	out, _ := json.Marshal(m)
	return string(out)
}

// open starts a QEMU instance on host h and returns its index.
func (w *world) open(h, seq int, running bool) int {
	a := engine.Addr{IP: mIP(h), Port: 0, Nonce: uint32(101 + len(w.insts))}
	w.insts = append(w.insts, inst{host: h, addr: a, seq: seq, running: running, ident: w.hosts[h].dom.ident})
	if !w.hosts[h].cut {
		w.f.Attach(mDisk, a, running)
	}
	return len(w.insts) - 1
}

// close ends instance i: its watch and lock go with it.
func (w *world) close(i int) {
	if i < 0 || w.insts[i].gone {
		return
	}
	w.insts[i].gone, w.insts[i].running = true, false
	w.f.Hide(w.insts[i].addr)
}

// killDom destroys the domain on h (poweroff, delete, recreate's cleanup);
// libvirt's `release end` hook clears the mark. A domain whose start is
// inside its `prepare begin` hook is not destroyed: libvirtd runs the hook
// synchronously in the domain's start job, without a timeout, and the domain
// is not active yet (no QEMU process), so `virsh destroy` answers "domain is
// not running" and a second `virsh create` of the name "already exists".
func (w *world) killDom(h int) {
	if w.hosts[h].dom.phase == phStalled {
		return
	}
	w.close(w.hosts[h].dom.inst)
	w.hosts[h].dom = dom{inst: -1, from: -1}
	w.hosts[h].mark, w.hosts[h].markWin = false, nil
}

func (w *world) who(h, seq int, source string) engine.Who {
	w.runs++
	w.lastWho = engine.Who{VM: mVM, Seq: seq, Host: mHosts[h], Source: source, Run: fmt.Sprintf("run%d", w.runs)}
	return engine.Who{VM: mVM, Seq: seq, Host: mHosts[h], Source: source, Run: fmt.Sprintf("run%d", w.runs), Pool: mPool,
		HostIPs: []netip.Addr{mIP(h)}}
}

// errCrashed is what every Ceph call returns once the step's process died.
var errCrashed = errors.New("model: the process crashed")

// crashCluster kills the step's process before Ceph call number budget
// (counting a batch of Blocklist calls as one call: the engine issues them
// concurrently): that call and every later one have no effect, so a lease
// taken stays held until it expires, as when the process dies.
type crashCluster struct {
	engine.Cluster
	budget, calls int
	dead, inBL    bool
}

func (c *crashCluster) gate(bl bool) error {
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

// engine returns an engine over the world's Ceph as a host step builds it
// (fencer.EngineOptions, MissingOK, OnBlocklisted spooling the event), whose
// process dies before Ceph call number crash (-1: never).
func (w *world) engine(crash int, spooled map[engine.Addr]bool) (*engine.Engine, *crashCluster) {
	var base engine.Cluster = w.f
	if w.resuming != nil {
		base = &resumeCluster{Cluster: w.f, s: w.resuming}
	}
	cc := &crashCluster{Cluster: base, budget: crash}
	e := engine.New(cc, engine.Options{Lease: mLease, MissingOK: true, Concurrency: 1,
		OnBlocklisted: func(image string, c engine.ClientReport) {
			if spooled != nil && !mutant("no-spool") {
				a, err := engine.ParseAddr(c.Address)
				if err == nil {
					spooled[a] = true
				}
			}
		}})
	now := w.now()
	engine.SetClockForModel(e, func() time.Time { return now })
	return e, cc
}

// claim reads the VM's claim (nil when none).
func (w *world) claim() *engine.Claim {
	b := w.f.Object(mPool, engine.ClaimObject(mVM))
	if len(b) == 0 {
		return nil
	}
	var c engine.Claim
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return &c
}

func (w *world) instName(a engine.Addr) string {
	for i, in := range w.insts {
		if in.addr == a {
			return fmt.Sprintf("q%d@%s", i+1, mHosts[in.host])
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
	if w.f.LeaseHeld(mPool, engine.ClaimObject(mVM)) {
		s += " LEASE HELD"
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
		fmt.Fprintf(&b, "%+v m%v c%v %s;", hs.dom, w.markFresh(h), hs.cut, w.windowKey(hs.markWin))
	}
	for _, in := range w.insts {
		fmt.Fprintf(&b, "%d %s %d %v %v %s %v %v %d;", in.host, in.addr, in.seq, in.running, in.gone, in.how, in.fromMig, in.byFE, in.ident)
	}
	b.WriteString(w.claimKey(w.f.Object(mPool, engine.ClaimObject(mVM))))
	if st := w.stalled; st != nil {
		fmt.Fprintf(&b, "|stalled %s %d %d %d stale=%v %s", st.source, st.host, st.seq, st.file, st.version != w.f.ObjectVersion(mPool, engine.ClaimObject(mVM)), w.claimKey(st.data))
	}
	fmt.Fprintf(&b, "|L%v|%s", w.f.LeaseHeld(mPool, engine.ClaimObject(mVM)), w.f.Observable())
	return b.String()
}

// claimKey is a stored claim as far as anything can tell it apart:
// generically (fields added to engine.Claim later count too), without the
// run id and the times, the window's expiry reduced to open or not.
func (w *world) claimKey(raw []byte) string {
	if len(raw) == 0 {
		return "none"
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(err)
	}
	delete(m, "run")
	delete(m, "updated")
	if win, ok := m["window"].(map[string]any); ok {
		delete(win, "opened")
		var c engine.Claim
		if json.Unmarshal(raw, &c) == nil && c.Window != nil {
			win["expires"] = w.now().Before(c.Window.Expires)
		}
	}
	out, _ := json.Marshal(m) // map keys sorted
	return string(out)
}
