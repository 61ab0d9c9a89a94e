//go:build cgo

// Package ceph is the one adapter between rbdfence and Ceph: it implements
// engine.Cluster with go-ceph's librados binding (librbd is loaded only to
// break a lock, see breakLock) and absorbs go-ceph's quirks
// in one place: LockExclusive's int result, the NUL in lock tags, the "v1:"
// address prefix, our own watcher, and the blocklist expiry that must be a
// JSON number with a fraction.
package ceph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Config says how to reach the cluster. Every call is bounded by OpTimeout,
// the connection by ConnectTimeout.
type Config struct {
	// Conf is a ceph.conf path; empty reads the default one unless MonHost is set.
	Conf string
	// MonHost is a monitor list ("ip:port,ip:port"); overrides the conf file.
	MonHost string
	// User is the cephx id without "client." (default "admin" as librados does).
	User string
	// Keyring is the path of the client's secret: a keyring ("[client.x]"
	// sections with "key = ..." lines) or a bare key file, as OpenNebula's
	// CEPH_KEY is (its scripts pass it to `rbd --keyfile`,
	// src/tm_mad/ceph/clone:109 of release-7.4.0). The file's content
	// decides which librados option reads it (KeySource).
	Keyring        string
	ConnectTimeout time.Duration
	OpTimeout      time.Duration
}

// Cluster is a connection to one Ceph cluster.
type Cluster struct {
	conn *rados.Conn
	cfg  Config
	own  map[engine.Addr]bool

	mu     sync.Mutex
	ioctxs map[string]*rados.IOContext
}

var _ engine.Cluster = (*Cluster)(nil)

// ConnectError is returned when the cluster cannot be reached or refuses us.
type ConnectError struct {
	MonHost string
	User    string
	Errno   int
	Err     error
}

func (e *ConnectError) Error() string {
	mons := e.MonHost
	if mons == "" {
		mons = "(monitors from ceph.conf)"
	}
	switch {
	case e.Errno == int(syscall.EACCES) || e.Errno == int(syscall.EPERM):
		return fmt.Sprintf("Ceph monitors %s refused client.%s: check the key in the keyring and the user's caps", mons, e.User)
	case errors.As(e.Err, new(*UnresolvedError)):
		return fmt.Sprintf("Ceph monitors %s: %v; check ceph.mon_host (or the disk's CEPH_HOST) and the name service", mons, e.Err)
	case e.Errno == int(syscall.ETIMEDOUT) || errors.Is(e.Err, context.DeadlineExceeded):
		return fmt.Sprintf("cannot reach Ceph monitors %s as client.%s: timed out; check mon_host (on a port other than 6789/3300 write v1: or v2: before the address), the network and the key", mons, e.User)
	}
	return fmt.Sprintf("cannot connect to Ceph monitors %s as client.%s: %v", mons, e.User, e.Err)
}

// Brief: engine.Briefer.
func (e *ConnectError) Brief() string {
	switch {
	case e.Errno == int(syscall.EACCES) || e.Errno == int(syscall.EPERM):
		return "Ceph refused client." + e.User + "; check key and caps"
	case errors.As(e.Err, new(*UnresolvedError)):
		return "monitor name unresolved; check ceph.mon_host"
	case e.Errno == int(syscall.ETIMEDOUT) || errors.Is(e.Err, context.DeadlineExceeded):
		return "Ceph monitors unreachable; check mon_host, network"
	}
	return "cannot connect to Ceph; check mon_host and the key"
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Outcome: the check could not be done.
func (e *ConnectError) Outcome() outcome.Kind { return outcome.Unavailable }

// Errno returns the Ceph/POSIX error number inside a go-ceph error, or 0.
func Errno(err error) int {
	var oe rados.OperationError // has no Unwrap: look inside ourselves
	if errors.As(err, &oe) && oe.OpError != nil {
		err = oe.OpError
	}
	var ec interface{ ErrorCode() int }
	if errors.As(err, &ec) {
		n := ec.ErrorCode()
		if n < 0 {
			n = -n
		}
		return n
	}
	return 0
}

// secs formats d as whole seconds (at least 1): the timeout options are
// of Ceph's "secs" type and reject fractions.
func secs(d time.Duration) string {
	n := int64((d + time.Second - 1) / time.Second)
	if n < 1 {
		n = 1
	}
	return strconv.FormatInt(n, 10)
}

// Connect opens a connection, bounded by cfg.ConnectTimeout and ctx.
func Connect(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.User == "" {
		cfg.User = "admin"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 10 * time.Second
	}
	if cfg.Keyring != "" {
		// librados would fall back to "no cephx" and print to stderr: say it plainly.
		if f, err := os.Open(cfg.Keyring); err != nil {
			return nil, &ConnectError{MonHost: cfg.MonHost, User: cfg.User, Err: fmt.Errorf("keyring %s: %w", cfg.Keyring, errors.Unwrap(err))}
		} else {
			f.Close()
		}
	}
	conn, err := rados.NewConnWithUser(cfg.User)
	if err != nil {
		return nil, &ConnectError{MonHost: cfg.MonHost, User: cfg.User, Errno: Errno(err), Err: err}
	}
	fail := func(what string, err error) (*Cluster, error) {
		conn.Shutdown()
		return nil, &ConnectError{MonHost: cfg.MonHost, User: cfg.User, Errno: Errno(err), Err: fmt.Errorf("%s: %w", what, err)}
	}
	switch {
	case cfg.Conf != "":
		if err := conn.ReadConfigFile(cfg.Conf); err != nil {
			return fail("reading "+cfg.Conf, err)
		}
	case cfg.MonHost == "":
		if err := conn.ReadDefaultConfigFile(); err != nil {
			return fail("reading the default ceph.conf", err)
		}
	}
	opts := [][2]string{
		{"client_mount_timeout", secs(cfg.ConnectTimeout)},
		{"rados_mon_op_timeout", secs(cfg.OpTimeout)},
		{"rados_osd_op_timeout", secs(cfg.OpTimeout)},
		// We blocklist explicitly first (DESIGN: Ceph bug 54613 with LockBreak).
		{"rbd_blocklist_on_break_lock", "false"},
		// Our stderr is OpenNebula's error channel: keep librados quiet there.
		{"log_to_stderr", "false"},
		{"err_to_stderr", "false"},
		{"log_file", ""},
	}
	if cfg.MonHost != "" {
		opts = append(opts, [2]string{"mon_host", cfg.MonHost})
	}
	if cfg.Keyring != "" {
		opt, err := KeySource(cfg.Keyring)
		if err != nil {
			conn.Shutdown()
			return nil, &ConnectError{MonHost: cfg.MonHost, User: cfg.User, Err: err}
		}
		if opt == "keyfile" {
			// Only this file: no default keyring may add another key.
			opts = append(opts, [2]string{"keyring", ""})
		}
		opts = append(opts, [2]string{opt, cfg.Keyring})
	}
	for _, o := range opts {
		if err := conn.SetConfigOption(o[0], o[1]); err != nil {
			return fail("setting "+o[0], err)
		}
	}
	// mon_host as librados will read it (the flag, else ceph.conf's).
	if mons, err := conn.GetConfigOption("mon_host"); err == nil {
		if err := resolveMons(ctx, mons, cfg.ConnectTimeout); err != nil {
			conn.Shutdown()
			return nil, &ConnectError{MonHost: cfg.MonHost, User: cfg.User, Err: err}
		}
	}
	done := make(chan error, 1)
	go func() { done <- conn.Connect() }()
	deadline := time.NewTimer(cfg.ConnectTimeout + 2*time.Second)
	defer deadline.Stop()
	select {
	case err := <-done:
		if err != nil {
			// librados reports a missing/unreadable keyring as ENOENT.
			if Errno(err) == int(syscall.ENOENT) && cfg.Keyring != "" {
				return fail("keyring "+cfg.Keyring+" missing or without a key for client."+cfg.User, err)
			}
			if Errno(err) == int(syscall.ETIMEDOUT) {
				conn.Shutdown()
				return nil, &ConnectError{MonHost: cfg.MonHost, User: cfg.User, Errno: int(syscall.ETIMEDOUT), Err: err}
			}
			return fail("connect", err)
		}
	case <-ctx.Done():
		return nil, &ConnectError{MonHost: cfg.MonHost, User: cfg.User, Err: ctx.Err()}
	case <-deadline.C:
		return nil, &ConnectError{MonHost: cfg.MonHost, User: cfg.User, Errno: int(syscall.ETIMEDOUT), Err: context.DeadlineExceeded}
	}
	c := &Cluster{conn: conn, cfg: cfg, own: map[engine.Addr]bool{}, ioctxs: map[string]*rados.IOContext{}}
	if s, err := conn.GetAddrs(); err == nil {
		for _, a := range ParseAddrList(s) {
			c.own[a] = true
		}
	}
	return c, nil
}

// ParseAddrList parses the address forms librados prints for one entity:
// "ip:port/nonce", "v1:ip:port/nonce", "[v2:ip:port/nonce,v1:ip:port/nonce]".
// Unparsable parts are dropped.
func ParseAddrList(s string) []engine.Addr {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]"))
	var out []engine.Addr
	for _, p := range strings.Split(s, ",") {
		if a, err := engine.ParseAddr(strings.TrimSpace(p)); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// OwnAddrs returns our own client addresses.
func (c *Cluster) OwnAddrs() []engine.Addr {
	out := make([]engine.Addr, 0, len(c.own))
	for a := range c.own {
		out = append(out, a)
	}
	return out
}

// InstanceID returns our client's global id (client.<ID>).
func (c *Cluster) InstanceID() uint64 { return c.conn.GetInstanceID() }

// Close shuts the connection down.
func (c *Cluster) Close() {
	c.mu.Lock()
	for _, io := range c.ioctxs {
		io.Destroy()
	}
	c.ioctxs = nil
	c.mu.Unlock()
	c.conn.Shutdown()
}

// call runs f in a goroutine and returns when it finishes or ctx is done. The
// librados timeouts bound f itself; ctx bounds the caller.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := f()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (c *Cluster) ioctx(pool, ns string) (*rados.IOContext, error) {
	key := pool + "\x00" + ns
	c.mu.Lock()
	defer c.mu.Unlock()
	if io, ok := c.ioctxs[key]; ok {
		return io, nil
	}
	io, err := c.conn.OpenIOContext(pool)
	if err != nil {
		if Errno(err) == int(syscall.ENOENT) {
			return nil, fmt.Errorf("pool %q does not exist", pool)
		}
		return nil, fmt.Errorf("pool %q: %w", pool, err)
	}
	io.SetNamespace(ns)
	c.ioctxs[key] = io
	return io, nil
}

// ImageClients lists lockers and watchers of img without our own client.
// Similar To: rbd lock ls POOL/IMAGE; rbd status POOL/IMAGE
func (c *Cluster) ImageClients(ctx context.Context, img engine.Image) (engine.Clients, error) {
	cl, errs := c.ImagesClients(ctx, []engine.Image{img}, 1)
	return cl[0], errs[0]
}

var _ engine.ImagesLister = (*Cluster)(nil)

// ImagesClients lists lockers and watchers of every image without our own
// client, as ImageClients does for one. It reads each image's header object
// directly (no image open, no watch of our own), asynchronously, in two
// round trips when the images fit in concurrency (fence.concurrency, the
// reads in flight at once): every rbd_id.<name> (the image ids), then every
// header's "rbd_lock" cls_lock holders and watchers, one compound read per
// header: exactly what librbd's own listing reads.
func (c *Cluster) ImagesClients(ctx context.Context, imgs []engine.Image, concurrency int) ([]engine.Clients, []error) {
	type res struct {
		cl   []engine.Clients
		errs []error
	}
	r, err := call(ctx, func() (res, error) {
		cl, errs := c.imagesClients(imgs, concurrency)
		return res{cl, errs}, nil
	})
	if err != nil {
		return make([]engine.Clients, len(imgs)), repeat(err, len(imgs))
	}
	return r.cl, r.errs
}

func (c *Cluster) imagesClients(imgs []engine.Image, concurrency int) ([]engine.Clients, []error) {
	out, errs := make([]engine.Clients, len(imgs)), make([]error, len(imgs))
	// 1. The image ids, from rbd_id.<name>.
	var idx []int
	var ios []*rados.IOContext
	var oids []string
	for i, img := range imgs {
		io, err := c.ioctx(img.Pool, img.Namespace)
		if err != nil {
			errs[i] = err
			continue
		}
		idx, ios, oids = append(idx, i), append(ios, io), append(oids, "rbd_id."+img.Name)
	}
	data, rerrs := readObjects(ios, oids, concurrency, 512)
	var hidx []int
	var hios []*rados.IOContext
	var headers []string
	for k, i := range idx {
		img := imgs[i]
		if errors.Is(rerrs[k], syscall.ENOENT) {
			// Not a format 2 image: missing, or format 1 (header object
			// "<name>.rbd", as librbd's detect_format looks for it).
			if _, err := ios[k].Stat(img.Name + ".rbd"); errors.Is(err, rados.ErrNotFound) {
				errs[i] = fmt.Errorf("%s: %w", img, engine.ErrImageNotFound)
			} else if err == nil {
				errs[i] = fmt.Errorf("%s: format 1 images are not supported", img)
			} else {
				errs[i] = fmt.Errorf("%s: %w", img, err)
			}
			continue
		}
		if rerrs[k] != nil {
			errs[i] = fmt.Errorf("reading the image id: %w", rerrs[k])
			continue
		}
		id, err := decodeID(data[k])
		if err != nil {
			errs[i] = fmt.Errorf("reading the image id: %w", err)
			continue
		}
		hidx, hios, headers = append(hidx, i), append(hios, ios[k]), append(headers, "rbd_header."+id)
	}
	// 2. Each header's lockers and watchers.
	ls, ws, herrs := headersClients(hios, headers, "rbd_lock", concurrency)
	for k, i := range hidx {
		if herrs[k] != nil {
			errs[i] = fmt.Errorf("listing lockers and watchers: %w", herrs[k])
			continue
		}
		out[i], errs[i] = c.foreign(ls[k], ws[k])
	}
	return out, errs
}

// foreign turns a header's lockers and watchers into Clients without ours.
func (c *Cluster) foreign(ls []rawLocker, ws []engine.Watcher) (engine.Clients, error) {
	var out engine.Clients
	for _, l := range ls {
		a, err := engine.ParseAddr(strings.TrimRight(l.addr, "\x00"))
		if err != nil {
			return engine.Clients{}, fmt.Errorf("locker %s: %w", l.client, err)
		}
		if c.own[a] {
			continue
		}
		out.Lockers = append(out.Lockers, engine.Locker{Client: strings.TrimRight(l.client, "\x00"), Cookie: strings.TrimRight(l.cookie, "\x00"), Addr: a})
	}
	for _, w := range ws {
		if !c.own[w.Addr] {
			out.Watchers = append(out.Watchers, w)
		}
	}
	return out, nil
}

// decodeID decodes rbd_id.<name>: a Ceph-encoded string (le32 length, bytes).
func decodeID(b []byte) (string, error) {
	if len(b) < 4 {
		return "", fmt.Errorf("rbd_id object is %d bytes", len(b))
	}
	l := int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24
	if l <= 0 || l > len(b)-4 {
		return "", fmt.Errorf("rbd_id object has a bad length %d", l)
	}
	return string(b[4 : 4+l]), nil
}

// blocklistCmd builds the mon command. expire must be a JSON number with a
// fraction: the monitor rejects 3600 and "3600".
func blocklistCmd(prefix, opKey string, a engine.Addr, expire time.Duration) []byte {
	type cmd struct {
		Prefix string      `json:"prefix"`
		Op     string      `json:"blocklistop"`
		Addr   string      `json:"addr"`
		Expire json.Number `json:"expire"`
	}
	b, _ := json.Marshal(cmd{Prefix: prefix, Op: "add", Addr: a.String(), Expire: json.Number(strconv.FormatFloat(expire.Seconds(), 'f', 1, 64))})
	if opKey != "blocklistop" {
		b = []byte(strings.Replace(string(b), `"blocklistop"`, `"`+opKey+`"`, 1))
	}
	return b
}

// Blocklist adds the exact client address to the OSD blocklist.
// Similar To: ceph osd blocklist add ADDR EXPIRE
func (c *Cluster) Blocklist(ctx context.Context, a engine.Addr, expire time.Duration) error {
	if !a.Exact() {
		return fmt.Errorf("refusing to blocklist %s: not one client instance", a)
	}
	return c.addBlocklist(ctx, a, expire)
}

// addBlocklist sends "osd blocklist add" for a (exact or whole address).
func (c *Cluster) addBlocklist(ctx context.Context, a engine.Addr, expire time.Duration) error {
	_, err := call(ctx, func() (struct{}, error) {
		_, info, err := c.conn.MonCommand(blocklistCmd("osd blocklist", "blocklistop", a, expire))
		if err != nil && Errno(err) == int(syscall.EINVAL) && strings.Contains(info, "command") {
			// Pre-Pacific monitors only know the old name.
			_, info, err = c.conn.MonCommand(blocklistCmd("osd blacklist", "blacklistop", a, expire))
		}
		if err != nil {
			if Errno(err) == int(syscall.EACCES) {
				return struct{}{}, fmt.Errorf("client.%s may not add blocklist entries (mon caps need 'profile rbd'): %v", c.cfg.User, err)
			}
			return struct{}{}, fmt.Errorf("%v %s", err, strings.TrimSpace(info))
		}
		return struct{}{}, nil
	})
	return err
}

// WaitForLatestOSDMap waits until our client has the newest OSD map.
func (c *Cluster) WaitForLatestOSDMap(ctx context.Context) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, c.conn.WaitForLatestOSDMap() })
	return err
}

// BreakLock breaks one lock; a lock already gone is not an error.
// Similar To: rbd lock rm POOL/IMAGE COOKIE CLIENT
func (c *Cluster) BreakLock(ctx context.Context, img engine.Image, l engine.Locker) error {
	_, err := call(ctx, func() (struct{}, error) {
		io, err := c.ioctx(img.Pool, img.Namespace)
		if err != nil {
			return struct{}{}, err
		}
		err = breakLock(io, img.Name, l.Client, l.Cookie)
		if errors.Is(err, errLockGone) {
			return struct{}{}, nil
		}
		return struct{}{}, err
	})
	return err
}

const leaseName = "rbdfence.claim"

// AcquireLease takes the exclusive lease on oid for d.
func (c *Cluster) AcquireLease(ctx context.Context, pool, oid, cookie string, d time.Duration) error {
	_, err := call(ctx, func() (struct{}, error) {
		io, err := c.conn.OpenIOContext(pool)
		if err != nil {
			return struct{}{}, fmt.Errorf("pool %q: %w", pool, err)
		}
		defer io.Destroy()
		ret, err := io.LockExclusive(oid, leaseName, cookie, "rbdfence VM claim", d, nil)
		if err != nil {
			return struct{}{}, err
		}
		switch ret {
		case 0, -int(syscall.EEXIST): // EEXIST: we hold it with this cookie already
			return struct{}{}, nil
		case -int(syscall.EBUSY):
			holder := "another run"
			if info, err := io.ListLockers(oid, leaseName); err == nil && len(info.Clients) > 0 {
				holder = fmt.Sprintf("%s (%s)", strings.TrimRight(info.Cookies[0], "\x00"), strings.TrimRight(info.Clients[0], "\x00"))
			}
			return struct{}{}, &engine.LeaseHeldError{Object: pool + "/" + oid, Holder: holder}
		}
		return struct{}{}, fmt.Errorf("lock %s/%s: error %d", pool, oid, ret)
	})
	return err
}

// ReleaseLease gives the lease up.
func (c *Cluster) ReleaseLease(ctx context.Context, pool, oid, cookie string) error {
	_, err := call(ctx, func() (struct{}, error) {
		io, err := c.conn.OpenIOContext(pool)
		if err != nil {
			return struct{}{}, err
		}
		defer io.Destroy()
		ret, err := io.Unlock(oid, leaseName, cookie)
		if err != nil {
			return struct{}{}, err
		}
		if ret != 0 && ret != -int(syscall.ENOENT) {
			return struct{}{}, fmt.Errorf("unlock %s/%s: error %d", pool, oid, ret)
		}
		return struct{}{}, nil
	})
	return err
}

const maxObject = 1 << 20

// ReadObject returns the object's data and version.
func (c *Cluster) ReadObject(ctx context.Context, pool, oid string) ([]byte, uint64, error) {
	type rv struct {
		b []byte
		v uint64
	}
	r, err := call(ctx, func() (rv, error) {
		io, err := c.conn.OpenIOContext(pool)
		if err != nil {
			return rv{}, err
		}
		defer io.Destroy()
		buf := make([]byte, maxObject)
		n, err := io.Read(oid, buf, 0)
		if errors.Is(err, rados.ErrNotFound) {
			return rv{}, engine.ErrObjectNotFound
		}
		if err != nil {
			return rv{}, err
		}
		v, err := io.GetLastVersion()
		return rv{buf[:n], v}, err
	})
	return r.b, r.v, err
}

// WriteObject replaces the object's data if its version is still version.
func (c *Cluster) WriteObject(ctx context.Context, pool, oid string, data []byte, version uint64) error {
	_, err := call(ctx, func() (struct{}, error) {
		io, err := c.conn.OpenIOContext(pool)
		if err != nil {
			return struct{}{}, err
		}
		defer io.Destroy()
		op := rados.CreateWriteOp()
		defer op.Release()
		if version == 0 {
			op.Create(rados.CreateExclusive)
		} else {
			op.AssertVersion(version)
		}
		if len(data) == 0 {
			// Empty means no record: go-ceph's WriteFull panics on an
			// empty buffer, so the object goes (its lease with it).
			op.Remove()
		} else {
			op.WriteFull(data)
		}
		err = op.Operate(io, oid, rados.OperationNoFlag)
		if err == nil {
			return struct{}{}, nil
		}
		switch Errno(err) {
		case int(syscall.ERANGE), int(syscall.EOVERFLOW), int(syscall.EEXIST):
			return struct{}{}, engine.ErrStale
		}
		return struct{}{}, err
	})
	return err
}
