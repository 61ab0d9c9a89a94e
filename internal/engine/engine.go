package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultExpire is the blocklist expiry used when Options.Expire is zero.
const DefaultExpire = 7 * 24 * time.Hour

// Options tune the engine. The zero value is usable.
type Options struct {
	// Expire is how long a blocklist entry lasts (default 7 days).
	Expire time.Duration
	// Allow lists client addresses that are reported but never fenced.
	Allow []netip.Prefix
	// Concurrency bounds how many images are inspected at once (default 16).
	Concurrency int
	// Lease is how long a VM claim lease lasts if its holder dies (default 60s).
	Lease time.Duration
	// MissingOK treats a missing image as having no clients instead of an error
	// (a VM start: nothing can have an image open that does not exist).
	MissingOK bool
	// OnBlocklisted, when set, is called for every client (with its image; ""
	// for a recorded address) right after its address is blocklisted and
	// before the OSD map wait and the lock break, so that callers can make the
	// fence durable (spool its event) before anything else can fail.
	OnBlocklisted func(image string, c ClientReport)
}

// Engine inspects RBD images and fences foreign clients. It holds no global
// state and does not log: every method returns a structured result.
type Engine struct {
	c   Cluster
	o   Options
	now func() time.Time
	// transition, when set, replaces Transition (the model-based test
	// breaks a rule with it to show that the model finds the violation).
	transition func(prev *Claim, ev Event) Ready
}

// New returns an engine over c.
func New(c Cluster, o Options) *Engine {
	if o.Expire <= 0 {
		o.Expire = DefaultExpire
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Lease <= 0 {
		o.Lease = 60 * time.Second
	}
	return &Engine{c: c, o: o, now: time.Now}
}

// Decision says why a client is or is not fenced.
type Decision string

// Decisions.
const (
	DecideFence       Decision = "fence"       // foreign client: fenced
	DecideAllowlisted Decision = "allowlisted" // address in the allowlist: reported
	DecideShareable   Decision = "shareable"   // image is shareable: reported
	DecideOutOfScope  Decision = "out-of-scope"
	DecideHandover    Decision = "handover" // migration window open: reported
	DecideRecorded    Decision = "recorded" // previous instance's recorded address: fenced
	DecideInstance    Decision = "instance" // the VM's running instance (recorded in its claim): kept
	DecideReadOnly    Decision = "readonly" // a writer of an image the VM only reads: reported
)

// Action says what was done to a client.
type Action string

// Actions.
const (
	ActNone        Action = "none"
	ActWouldFence  Action = "would-fence"
	ActBlocklisted Action = "blocklisted"
	ActUnlocked    Action = "blocklisted+unlocked"
	ActFailed      Action = "failed"
)

// ClientReport is one client of one image (or a recorded address).
type ClientReport struct {
	Address  string    `json:"address"`
	Client   string    `json:"client,omitempty"`
	Cookie   string    `json:"cookie,omitempty"`
	Locker   bool      `json:"locker"`
	Watcher  bool      `json:"watcher"`
	Decision Decision  `json:"decision"`
	Action   Action    `json:"action"`
	Expire   time.Time `json:"expire,omitzero"`
	Error    string    `json:"error,omitempty"`

	addr   Addr
	locker *Locker
}

// Fenced reports whether this client was blocklisted by this run.
func (c ClientReport) Fenced() bool {
	return c.Action == ActBlocklisted || c.Action == ActUnlocked
}

// ImageReport is what was seen and done on one image.
type ImageReport struct {
	Image     string         `json:"image"`
	Shareable bool           `json:"shareable,omitempty"`
	ReadOnly  bool           `json:"readonly,omitempty"`
	Missing   bool           `json:"missing,omitempty"`
	Clients   []ClientReport `json:"clients"`
	Error     string         `json:"error,omitempty"`

	img Image
}

// Report is the result of a check or fence run.
type Report struct {
	DryRun bool          `json:"dry_run"`
	Images []ImageReport `json:"images"`
	// Recorded are addresses of a previous instance that were not visible
	// on any image but were fenced because the claim recorded them.
	Recorded []ClientReport `json:"recorded,omitempty"`
	Fenced   int            `json:"fenced"`
	Errors   int            `json:"errors"`
}

// Merge adds o's images, recorded addresses and counts to r (disks of one VM
// reached through different Ceph access).
func (r *Report) Merge(o *Report) {
	if o == nil {
		return
	}
	r.Images = append(r.Images, o.Images...)
	r.Recorded = append(r.Recorded, o.Recorded...)
	r.Fenced += o.Fenced
	r.Errors += o.Errors
}

// Err returns nil when every image was inspected and every fence completed,
// otherwise an error naming what failed.
func (r *Report) Err() error {
	var msgs []string
	for _, im := range r.Images {
		if im.Error != "" {
			msgs = append(msgs, im.Error)
		}
		for _, c := range im.Clients {
			if c.Error != "" {
				msgs = append(msgs, fmt.Sprintf("%s: client %s: %s", im.Image, c.Address, c.Error))
			}
		}
	}
	for _, c := range r.Recorded {
		if c.Error != "" {
			msgs = append(msgs, fmt.Sprintf("recorded client %s: %s", c.Address, c.Error))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return &IncompleteError{Problems: msgs, DryRun: r.DryRun}
}

// IncompleteError says a check or fence did not complete everywhere.
type IncompleteError struct {
	Problems []string
	DryRun   bool // a check (nothing was to be fenced), not a fence
}

func (e *IncompleteError) Error() string {
	what := "fence"
	if e.DryRun {
		what = "check"
	}
	return fmt.Sprintf("%s incomplete (%d problem(s)): %s", what, len(e.Problems), strings.Join(e.Problems, "; "))
}

// ScopeKind selects which foreign clients a run may fence.
type ScopeKind int

// Scope kinds.
const (
	ScopeAll     ScopeKind = iota // every foreign client
	ScopeOnHost                   // only clients whose IP is one of HostIPs
	ScopeOffHost                  // only clients whose IP is not one of HostIPs
)

// Scope restricts fencing for live migration steps.
type Scope struct {
	Kind    ScopeKind
	HostIPs []netip.Addr
	// LockersOnly fences lock owners only; mere watchers are reported.
	LockersOnly bool
}

func (s Scope) covers(c ClientReport) bool {
	if s.LockersOnly && !c.Locker {
		return false
	}
	if s.Kind == ScopeAll {
		return true
	}
	on := false
	for _, ip := range s.HostIPs {
		if c.addr.SameIP(ip) {
			on = true
			break
		}
	}
	return on == (s.Kind == ScopeOnHost)
}

// Check inspects the images and reports what Fence would do. It changes nothing.
func (e *Engine) Check(ctx context.Context, imgs []Image, scope Scope) *Report {
	r := e.inspect(ctx, imgs, scope, false)
	r.DryRun = true
	for i := range r.Images {
		for j := range r.Images[i].Clients {
			c := &r.Images[i].Clients[j]
			if c.Decision == DecideFence {
				c.Action = ActWouldFence
			}
		}
	}
	r.count()
	return r
}

// Fence inspects the images and fences every foreign client in scope: it
// blocklists each exact address for the configured expiry, waits until the OSD
// map carrying the entries is in force, then breaks the locks they held.
// extra are addresses recorded for a previous instance, fenced even when not
// visible. Running it twice is safe.
func (e *Engine) Fence(ctx context.Context, imgs []Image, scope Scope, extra []Addr) *Report {
	r := e.inspect(ctx, imgs, scope, false)
	e.fence(ctx, r, extra)
	r.count()
	return r
}

// handover reports every client of the images without fencing (migration window).
func (e *Engine) handover(ctx context.Context, imgs []Image) *Report {
	r := e.inspect(ctx, imgs, Scope{}, true)
	r.count()
	return r
}

func (r *Report) count() {
	r.Fenced, r.Errors = 0, 0
	for _, im := range r.Images {
		if im.Error != "" {
			r.Errors++
		}
		for _, c := range im.Clients {
			if c.Fenced() {
				r.Fenced++
			}
			if c.Error != "" {
				r.Errors++
			}
		}
	}
	for _, c := range r.Recorded {
		if c.Fenced() {
			r.Fenced++
		}
		if c.Error != "" {
			r.Errors++
		}
	}
}

func (e *Engine) inspect(ctx context.Context, imgs []Image, scope Scope, handover bool) *Report {
	r := &Report{Images: make([]ImageReport, len(imgs))}
	for i, img := range imgs {
		r.Images[i] = ImageReport{Image: img.String(), Shareable: img.Shareable, ReadOnly: img.ReadOnly, img: img, Clients: []ClientReport{}}
	}
	record := func(ir *ImageReport, cl Clients, err error) {
		switch {
		case errors.Is(err, ErrImageNotFound) && e.o.MissingOK:
			ir.Missing = true
		case errors.Is(err, ErrImageNotFound):
			ir.Missing = true
			ir.Error = fmt.Sprintf("image %s does not exist", ir.Image)
		case err != nil:
			ir.Error = fmt.Sprintf("%s: cannot list lockers and watchers: %v", ir.Image, err)
		default:
			ir.Clients = e.classify(ir.img, cl, scope, handover)
		}
	}
	if b, ok := e.c.(ImagesLister); ok && len(imgs) > 0 {
		cls, errs := b.ImagesClients(ctx, imgs, e.o.Concurrency)
		for i := range r.Images {
			record(&r.Images[i], cls[i], errs[i])
		}
		return r
	}
	sem := make(chan struct{}, e.o.Concurrency)
	var wg sync.WaitGroup
	for i := range r.Images {
		wg.Add(1)
		go func(ir *ImageReport) {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				ir.Error = fmt.Sprintf("%s: not inspected: %v", ir.Image, ctx.Err())
				return
			}
			defer func() { <-sem }()
			cl, err := e.c.ImageClients(ctx, ir.img)
			record(ir, cl, err)
		}(&r.Images[i])
	}
	wg.Wait()
	return r
}

// classify merges lockers and watchers by address and decides each client.
func (e *Engine) classify(img Image, cl Clients, scope Scope, handover bool) []ClientReport {
	byAddr := map[Addr]*ClientReport{}
	var order []Addr
	get := func(a Addr) *ClientReport {
		if c, ok := byAddr[a]; ok {
			return c
		}
		c := &ClientReport{Address: a.String(), addr: a}
		byAddr[a] = c
		order = append(order, a)
		return c
	}
	for i := range cl.Lockers {
		l := cl.Lockers[i]
		c := get(l.Addr)
		c.Locker, c.Client, c.Cookie, c.locker = true, l.Client, l.Cookie, &l
	}
	for _, w := range cl.Watchers {
		c := get(w.Addr)
		c.Watcher = true
		if c.Client == "" {
			c.Client = fmt.Sprintf("client.%d", w.ID)
		}
	}
	out := make([]ClientReport, 0, len(order))
	for _, a := range order {
		c := byAddr[a]
		c.Action = ActNone
		switch {
		case handover:
			c.Decision = DecideHandover
		case img.Shareable:
			c.Decision = DecideShareable
		case img.ReadOnly:
			// The VM does not write this image (a CD-ROM, a read-only
			// disk): a writer there is reported, not fenced; it may be
			// another VM's legitimate use of the image.
			c.Decision = DecideReadOnly
		case e.allowed(a):
			c.Decision = DecideAllowlisted
		case !a.Exact():
			c.Decision = DecideOutOfScope
			c.Error = "address has no nonce: refusing to blocklist a whole host"
		case !scope.covers(*c):
			c.Decision = DecideOutOfScope
		default:
			c.Decision = DecideFence
		}
		out = append(out, *c)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
}

func (e *Engine) allowed(a Addr) bool {
	for _, p := range e.o.Allow {
		if p.Contains(a.IP) || p.Contains(a.IP.Unmap()) {
			return true
		}
	}
	return false
}

// notify calls OnBlocklisted for every client with address a.
func (e *Engine) notify(r *Report, a Addr, expire time.Time) {
	for _, im := range r.Images {
		for _, c := range im.Clients {
			if c.addr == a && c.Decision == DecideFence {
				c.Action, c.Expire = ActBlocklisted, expire
				e.o.OnBlocklisted(im.Image, c)
			}
		}
	}
	for _, c := range r.Recorded {
		if c.addr == a {
			c.Action, c.Expire = ActBlocklisted, expire
			e.o.OnBlocklisted("", c)
		}
	}
}

// fence blocklists every client decided "fence" plus extra, waits for the OSD
// map, then breaks their locks, recording each outcome in r.
func (e *Engine) fence(ctx context.Context, r *Report, extra []Addr) {
	type target struct {
		err    error
		expire time.Time
	}
	targets := map[Addr]*target{}
	var order []Addr
	add := func(a Addr) {
		if _, ok := targets[a]; !ok {
			targets[a] = &target{}
			order = append(order, a)
		}
	}
	visible := map[Addr]bool{}
	for _, im := range r.Images {
		for _, c := range im.Clients {
			visible[c.addr] = true
			if c.Decision == DecideFence {
				add(c.addr)
			}
		}
	}
	for _, a := range extra {
		if visible[a] || !a.Exact() || e.allowed(a) {
			continue
		}
		add(a)
		r.Recorded = append(r.Recorded, ClientReport{Address: a.String(), addr: a, Decision: DecideRecorded, Action: ActNone})
	}
	if len(order) == 0 {
		return
	}
	// All entries at once: the monitors commit concurrent additions in one
	// OSD map proposal instead of one proposal (up to a paxos interval) each.
	var (
		ok   int
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, e.o.Concurrency)
		when = e.now().Add(e.o.Expire).UTC().Truncate(time.Second)
	)
	for _, a := range order {
		t := targets[a]
		t.expire = when
		wg.Add(1)
		go func(a Addr, t *target) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := e.c.Blocklist(ctx, a, e.o.Expire); err != nil {
				t.err = fmt.Errorf("blocklist failed: %w", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ok++
			if e.o.OnBlocklisted != nil {
				e.notify(r, a, t.expire)
			}
		}(a, t)
	}
	wg.Wait()
	if ok > 0 {
		if err := e.c.WaitForLatestOSDMap(ctx); err != nil {
			for _, t := range targets {
				if t.err == nil {
					t.err = fmt.Errorf("blocklisted, but the new OSD map was not confirmed: %w", err)
				}
			}
		}
	}
	for i := range r.Images {
		im := &r.Images[i]
		for j := range im.Clients {
			c := &im.Clients[j]
			t, ok := targets[c.addr]
			if !ok || c.Decision != DecideFence {
				continue
			}
			c.Expire = t.expire
			if t.err != nil {
				c.Action, c.Error = ActFailed, t.err.Error()
				continue
			}
			c.Action = ActBlocklisted
			if c.locker != nil {
				if err := e.c.BreakLock(ctx, im.img, *c.locker); err != nil {
					c.Action, c.Error = ActFailed, fmt.Sprintf("blocklisted, but breaking lock %q failed: %v", c.Cookie, err)
					continue
				}
				c.Action = ActUnlocked
			}
		}
	}
	for i := range r.Recorded {
		c := &r.Recorded[i]
		t := targets[c.addr]
		c.Expire = t.expire
		if t.err != nil {
			c.Action, c.Error = ActFailed, t.err.Error()
		} else {
			c.Action = ActBlocklisted
		}
	}
}
