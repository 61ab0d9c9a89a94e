//go:build pacific

// Command zombie is a real librbd client that plays a zombie QEMU in tests
// and in the demo: it opens one RBD image read-write and either keeps
// writing to it (write mode: librbd takes the exclusive lock) or only keeps
// it open (idle mode: it is a watcher and holds no lock).
//
//	zombie --mon 127.0.0.1:6789 --id libvirt --keyring K --image one/img [--mode write|idle]
//
// It prints JSON lines on stdout:
//
//	{"event":"ready","addr":"<rados_getaddrs>","gid":<instance id>,"image":"pool/name"}
//	{"event":"write","n":1,"ok":true}
//	{"event":"write","n":2,"ok":false,"errno":108,"error":"..."}
//
// and keeps writing after failures (errno is the positive errno: 108 is
// ESHUTDOWN, what a blocklisted client gets). SIGTERM or SIGINT close the image and
// the connection; if that hangs (for example because the client is
// blocklisted) it exits anyway after 2 s. Errors before "ready" go to stderr
// as one line: exit 2 for bad flags, 1 for Ceph errors.
//
// --bind IP makes the client connect from IP (e.g. 127.0.0.2), so that
// Ceph shows and blocklists it as IP:0/nonce, as if it ran on another host.
// Setting public_addr and ms_bind_before_connect (which this also does) is
// not enough on Ceph 16: librados never calls the messenger's client_bind,
// so those options are ignored for a librados client and it connects from
// whatever source address the kernel picks. The bind is therefore done in
// an interposed connect(2) below; "ready" is only printed if Ceph reports
// the client address on IP.
//
// Build with -tags pacific.
package main

/*
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <unistd.h>

// --bind: librados never binds its client sockets (ms_bind_before_connect
// only applies to messengers that call client_bind, which librados does
// not), so this program interposes connect(2) for the Ceph libraries it
// loads: before an IPv4 socket that is not bound yet connects, bind it to
// the --bind address. The monitors then see, and tell the client, that
// address. The Go runtime makes its own system calls and is not affected.
static struct sockaddr_in zombie_bind_addr;
static volatile int zombie_bind_set;

static int zombie_set_bind(const char *ip) {
	memset(&zombie_bind_addr, 0, sizeof(zombie_bind_addr));
	zombie_bind_addr.sin_family = AF_INET;
	if (inet_pton(AF_INET, ip, &zombie_bind_addr.sin_addr) != 1)
		return -1;
	zombie_bind_set = 1;
	return 0;
}

static int zombie_bind_hits;

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
	if (zombie_bind_set && addr != NULL && addr->sa_family == AF_INET) {
		struct sockaddr_in cur;
		socklen_t cl = sizeof(cur);
		if (getsockname(fd, (struct sockaddr *)&cur, &cl) == 0 &&
		    cur.sin_family == AF_INET && cur.sin_port == 0 &&
		    cur.sin_addr.s_addr == htonl(INADDR_ANY)) {
			if (bind(fd, (const struct sockaddr *)&zombie_bind_addr,
				 sizeof(zombie_bind_addr)) < 0)
				return -1;
			__atomic_add_fetch(&zombie_bind_hits, 1, __ATOMIC_RELAXED);
		}
	}
	return (int)syscall(SYS_connect, fd, addr, len);
}

static int zombie_get_bind_hits(void) {
	return __atomic_load_n(&zombie_bind_hits, __ATOMIC_RELAXED);
}
*/
import "C"

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
)

const closeGrace = 2 * time.Second

type options struct {
	mon      string
	id       string
	keyring  string
	conf     string
	pool     string
	name     string
	mode     string
	interval time.Duration
	bind     string
	timeout  time.Duration
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("zombie", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.mon, "mon", "", "monitor address(es), IP:PORT (Ceph mon_host syntax)")
	fs.StringVar(&o.id, "id", "libvirt", "Ceph user name without 'client.'")
	fs.StringVar(&o.keyring, "keyring", "", "keyring path")
	fs.StringVar(&o.conf, "conf", "", "ceph.conf to read (optional)")
	image := fs.String("image", "", "POOL/NAME of the RBD image")
	fs.StringVar(&o.mode, "mode", "write", "write|idle")
	fs.DurationVar(&o.interval, "interval", 100*time.Millisecond, "time between writes in write mode")
	fs.StringVar(&o.bind, "bind", "", "local IP to bind before connecting (public_addr)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "timeout for connecting to the cluster")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errors.New("usage: zombie --mon IP:PORT --id USER --keyring PATH [--conf PATH] --image POOL/NAME [--mode write|idle] [--interval D] [--bind IP] [--timeout D]")
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.mon == "" && o.conf == "" {
		return nil, errors.New("--mon is required (or --conf with a mon host)")
	}
	if o.id == "" || strings.HasPrefix(o.id, "client.") {
		return nil, errors.New("--id must be a user name without 'client.', e.g. libvirt")
	}
	pool, name, ok := strings.Cut(*image, "/")
	if !ok || pool == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--image must be POOL/NAME, got %q", *image)
	}
	o.pool, o.name = pool, name
	if o.mode != "write" && o.mode != "idle" {
		return nil, fmt.Errorf("--mode must be write or idle, got %q", o.mode)
	}
	if o.interval <= 0 {
		return nil, errors.New("--interval must be positive")
	}
	if o.timeout <= 0 {
		return nil, errors.New("--timeout must be positive")
	}
	if ip := net.ParseIP(o.bind); o.bind != "" && (ip == nil || ip.To4() == nil) {
		return nil, fmt.Errorf("--bind must be an IPv4 address, got %q", o.bind)
	}
	return o, nil
}

// out writes one JSON line per call to stdout (unbuffered: each line is
// one write(2)).
var outMu sync.Mutex

func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	b = append(b, '\n')
	outMu.Lock()
	defer outMu.Unlock()
	_, _ = os.Stdout.Write(b)
}

type readyEvent struct {
	Event string `json:"event"`
	Addr  string `json:"addr"`
	GID   uint64 `json:"gid"`
	Image string `json:"image"`
}

type writeEvent struct {
	Event string `json:"event"`
	N     int    `json:"n"`
	OK    bool   `json:"ok"`
	Errno int    `json:"errno,omitempty"`
	Error string `json:"error,omitempty"`
}

// errnoOf returns the positive errno carried by a go-ceph error, or 0.
func errnoOf(err error) int {
	var ec interface{ ErrorCode() int }
	if errors.As(err, &ec) {
		c := ec.ErrorCode()
		if c < 0 {
			c = -c
		}
		return c
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return int(en)
	}
	return 0
}

func fatal(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "zombie: "+format+"\n", a...)
	os.Exit(code)
}

func connect(o *options) (*rados.Conn, error) {
	conn, err := rados.NewConnWithUser(o.id)
	if err != nil {
		return nil, fmt.Errorf("create rados handle: %w", err)
	}
	if o.conf != "" {
		if err := conn.ReadConfigFile(o.conf); err != nil {
			return nil, fmt.Errorf("read %s: %w", o.conf, err)
		}
	}
	secs := strconv.Itoa(int((o.timeout + time.Second - 1) / time.Second))
	set := [][2]string{
		{"client_mount_timeout", secs},
		{"rados_mon_op_timeout", secs},
		// like QEMU with cache=none (OpenNebula's default): a write
		// returns only once the OSD has it.
		{"rbd_cache", "false"},
	}
	if o.mon != "" {
		set = append(set, [2]string{"mon_host", o.mon})
	}
	if o.keyring != "" {
		f, err := os.Open(o.keyring)
		if err != nil {
			return nil, fmt.Errorf("--keyring: %w", err)
		}
		f.Close()
		set = append(set, [2]string{"keyring", o.keyring})
	}
	if o.bind != "" {
		// These two alone do nothing for librados (see the C preamble);
		// they are set for librbd/librados versions that honour them.
		set = append(set, [2]string{"public_addr", o.bind}, [2]string{"ms_bind_before_connect", "true"})
		cip := C.CString(o.bind)
		rc := C.zombie_set_bind(cip)
		C.free(unsafe.Pointer(cip))
		if rc != 0 {
			return nil, fmt.Errorf("--bind %s: not an IPv4 address", o.bind)
		}
	}
	for _, kv := range set {
		if err := conn.SetConfigOption(kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("set %s: %w", kv[0], err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- conn.Connect() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, fmt.Errorf("connect to %s as client.%s: %w", monOrConf(o), o.id, err)
		}
	case <-time.After(o.timeout + 2*time.Second):
		return nil, fmt.Errorf("connect to %s as client.%s: timed out after %s", monOrConf(o), o.id, o.timeout)
	}
	return conn, nil
}

func monOrConf(o *options) string {
	if o.mon != "" {
		return o.mon
	}
	return o.conf
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fatal(2, "%v", err)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	conn, err := connect(o)
	if err != nil {
		fatal(1, "%v", err)
	}
	ioctx, err := conn.OpenIOContext(o.pool)
	if err != nil {
		fatal(1, "open pool %s: %v", o.pool, err)
	}
	img, err := rbd.OpenImage(ioctx, o.name, rbd.NoSnapshot)
	if err != nil {
		fatal(1, "open image %s/%s: %v", o.pool, o.name, err)
	}
	addr, err := conn.GetAddrs()
	if err != nil {
		fatal(1, "get client address: %v", err)
	}
	if o.bind != "" && !strings.Contains(addr, o.bind+":") {
		fatal(1, "--bind %s did not take effect: client address is %s (%d sockets bound)", o.bind, addr, int(C.zombie_get_bind_hits()))
	}
	emit(readyEvent{Event: "ready", Addr: addr, GID: conn.GetInstanceID(), Image: o.pool + "/" + o.name})

	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		if o.mode != "write" {
			<-stop
			return
		}
		writeLoop(img, o.interval, stop)
	}()

	<-sigs
	close(stop)
	// Bounded shutdown: a blocklisted client may hang in a write or in
	// close; never let that keep the process alive.
	time.AfterFunc(closeGrace, func() { os.Exit(0) })
	<-writerDone
	_ = img.Close()
	ioctx.Destroy()
	conn.Shutdown()
	os.Exit(0)
}

func writeLoop(img *rbd.Image, interval time.Duration, stop <-chan struct{}) {
	buf := make([]byte, 4096)
	pattern := fmt.Sprintf("rbdfence-zombie pid=%d ", os.Getpid())
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		for i := range buf {
			buf[i] = pattern[i%len(pattern)]
		}
		copy(buf, fmt.Sprintf("rbdfence-zombie pid=%d n=%d\n", os.Getpid(), n))
		_, err := img.WriteAt(buf, 0)
		if err != nil {
			emit(writeEvent{Event: "write", N: n, OK: false, Errno: errnoOf(err), Error: err.Error()})
		} else {
			emit(writeEvent{Event: "write", N: n, OK: true})
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}
