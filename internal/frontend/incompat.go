package frontend

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/outcome"
)

// A host whose userland cannot run the host binary: the synced binary is
// the front-end's build (cgo: it needs the front-end's glibc or newer and
// librados.so.2), so on an older distribution the dynamic loader refuses
// it before it reads a byte ("version `GLIBC_2.34' not found", exit 1;
// "librados.so.2: cannot open shared object file", exit 127), and a binary
// of another architecture does not start at all (exit 126). The front-end
// then asks the host, in plain sh, what it has and says in one line what
// is needed, what is there and the fix (README: Host platforms).

// cannotStart reports whether a host step's exit code and last stderr line
// say that the binary could not start (not that the step failed).
func cannotStart(code int, why string) bool {
	if code == 126 || code == 127 {
		return true
	}
	return strings.Contains(why, "error while loading shared libraries") || strings.Contains(why, "symbol lookup error") ||
		(strings.Contains(why, "GLIBC_") && strings.Contains(why, "not found")) ||
		strings.Contains(why, "Exec format error") || strings.Contains(why, "cannot execute binary file")
}

// probeScript prints what a host has for the host binary, one key=value a
// line ($1: the package binary, "" for none; $2: the synced one). POSIX sh
// and the tools every distribution has; nothing of rbdfence.
const probeScript = `p=$1 s=$2
( . /etc/os-release 2>/dev/null; echo "os=${PRETTY_NAME:-}" )
echo "arch=$(uname -m 2>/dev/null)"
echo "glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null)"
echo "dpkg=$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' librados2 2>/dev/null)"
echo "rpm=$(rpm -q --qf '%{VERSION}-%{RELEASE}' librados2 2>/dev/null)"
echo "libso=$( { ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep -c 'librados\.so\.2 ')"
echo "rbd=$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' librbd1 2>/dev/null)"
echo "rbdrpm=$(rpm -q --qf '%{VERSION}-%{RELEASE}' librbd1 2>/dev/null)"
echo "rbdso=$( { ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep -c 'librbd\.so\.1 ')"
if [ -n "$p" ] && [ -x "$p" ]; then b=$p; else b=$s; fi
echo "ran=$b"
if [ -f "$b" ] && [ -x "$b" ]; then echo runnable=yes; else echo runnable=no; fi
`

// hostHas is what probeScript found.
type hostHas struct {
	os, arch, glibc, librados, librbd string
	libso, rbdso                      bool // librados.so.2, librbd.so.1 in the loader's cache
	ran                               string
	absent                            bool // ran is no executable file there (onehost sync has not put it)
}

func parseProbe(out []byte) hostHas {
	var h hostHas
	for _, l := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		v = strings.TrimSpace(v)
		switch k {
		case "os":
			h.os = v
		case "arch":
			h.arch = v
		case "glibc":
			h.glibc = strings.TrimPrefix(v, "glibc ")
		case "dpkg":
			if f := strings.Fields(v); len(f) == 2 && strings.HasPrefix(f[0], "ii") {
				h.librados = f[1]
			}
		case "rpm":
			if h.librados == "" && v != "" && v[0] >= '0' && v[0] <= '9' {
				h.librados = v
			}
		case "libso":
			n, _ := strconv.Atoi(v)
			h.libso = n > 0
		case "rbd":
			if f := strings.Fields(v); len(f) == 2 && strings.HasPrefix(f[0], "ii") {
				h.librbd = f[1]
			}
		case "rbdrpm": // rpm prints "package librbd1 is not installed" on stdout
			if h.librbd == "" && v != "" && v[0] >= '0' && v[0] <= '9' {
				h.librbd = v
			}
		case "rbdso":
			n, _ := strconv.Atoi(v)
			h.rbdso = n > 0
		case "ran":
			h.ran = v
		case "runnable":
			h.absent = v == "no"
		}
	}
	return h
}

func (h hostHas) String() string {
	var parts []string
	if h.os != "" {
		parts = append(parts, h.os)
	}
	if h.arch != "" {
		parts = append(parts, h.arch)
	}
	if h.glibc != "" {
		parts = append(parts, "glibc "+h.glibc)
	} else {
		parts = append(parts, "no glibc")
	}
	parts = append(parts, library("librados2", h.librados, "librados.so.2", h.libso), library("librbd1", h.librbd, "librbd.so.1", h.rbdso))
	return strings.Join(parts, ", ")
}

// library says how a host has a library: its package's version, a file of
// no package the loader knows, or none.
func library(pkg, version, soname string, cached bool) string {
	switch {
	case version != "":
		return pkg + " " + version
	case cached:
		return "a " + soname + " of no package"
	}
	return "no " + soname
}

// binaryNeeds is what a host binary needs of its host, read from its ELF
// file (the front-end's copy of the synced binary).
type binaryNeeds struct {
	glibc    string // the newest GLIBC_ symbol version it uses, e.g. "2.34"
	librados bool   // it links librados.so.2
	librbd   bool   // it loads librbd.so.1 (to break a lock)
	arch     string // uname -m of its machine, e.g. x86_64
}

func readNeeds(path string) (binaryNeeds, error) {
	var n binaryNeeds
	f, err := elf.Open(path)
	if err != nil {
		return n, err
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		n.arch = "x86_64"
	case elf.EM_AARCH64:
		n.arch = "aarch64"
	case elf.EM_PPC64:
		n.arch = "ppc64le"
	case elf.EM_S390:
		n.arch = "s390x"
	default:
		n.arch = f.Machine.String()
	}
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if l == "librados.so.2" {
			n.librados = true
		}
	}
	if b, err := os.ReadFile(path); err == nil {
		n.librbd = bytes.Contains(b, []byte("librbd.so.1\x00"))
	}
	syms, _ := f.ImportedSymbols()
	for _, s := range syms {
		if v, ok := strings.CutPrefix(s.Version, "GLIBC_"); ok && versionLess(n.glibc, v) {
			n.glibc = v
		}
	}
	return n, nil
}

func (n binaryNeeds) String() string {
	parts := []string{n.arch}
	if n.glibc != "" {
		parts = append(parts, "glibc "+n.glibc+" or later")
	}
	switch {
	case n.librados && n.librbd:
		parts = append(parts, "librados.so.2 and librbd.so.1 (librados2, librbd1 16.2 or later)")
	case n.librados:
		parts = append(parts, "librados.so.2 (librados2 16.2 or later)")
	}
	return strings.Join(parts, ", ")
}

// versionLess compares dotted numbers ("" is the least).
func versionLess(a, b string) bool {
	if a == "" {
		return b != ""
	}
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// probeTimeout bounds the probe after ssh's connect.
const probeTimeout = 10 * time.Second

// incompatible is the one-line error of a host that cannot start its host
// binary (ld's reason why): what the binary needs, what the host has, the
// fix. vm < 0: not about a VM (doctor).
func (e *Env) incompatible(ctx context.Context, vm int, host, why string) *Error {
	o := e.Cfg.OpenNebula
	has := hostHas{ran: o.HostBinary}
	probed := false
	if argv, err := e.sshArgv(host, []string{"sh", "-c", probeScript, "rbdfence-probe", o.HostPackageBinary, o.HostBinary}); err == nil {
		var out capBuffer
		out.max = 16 << 10
		code, rerr := run(ctx, proc{argv: argv, stdout: &out, stderr: &capBuffer{max: 4096},
			timeout: time.Duration(e.Cfg.Timeouts.SSH) + probeTimeout})
		if rerr == nil && code == 0 {
			has, probed = parseProbe(out.buf.Bytes()), true
		}
	}
	if probed && has.absent {
		// Not the platform: the binary is not there to start (127, the
		// shell's "not found") or has lost its mode (126).
		return briefErrorf(outcome.Unavailable, vm, "no rbdfence on "+host+"; run onehost sync --force", "host %s has no runnable rbdfence host binary %s (%s); fix: run 'onehost sync --force' as oneadmin on the front-end (it copies the host binary to %s), or install the rbdfence and rbdfence-host packages on %s",
			host, has.ran, orDash(why), host, host)
	}
	msg := fmt.Sprintf("host %s cannot start rbdfence's host binary %s (%s)", host, has.ran, loaderReason(why))
	pkg := o.HostPackageBinary != "" && has.ran == o.HostPackageBinary
	var needs binaryNeeds
	var nerr error
	if !pkg {
		// The synced binary is the front-end's own copy.
		needs, nerr = readNeeds(o.LocalBinary)
		if nerr == nil {
			msg += ": it needs " + needs.String()
		}
	}
	if probed {
		msg += "; " + host + " has " + has.String()
	} else {
		msg += "; what " + host + " has could not be read"
	}
	built := "its distribution"
	if has.os != "" {
		built = has.os
	}
	var fix string
	switch {
	case pkg:
		fix = fmt.Sprintf("reinstall the rbdfence and rbdfence-host packages built for %s on %s", built, host)
	case nerr == nil && probed && needs.glibc != "" && has.glibc != "" && !versionLess(has.glibc, needs.glibc) &&
		needs.arch == has.arch && (needs.librados && !has.libso || needs.librbd && !has.rbdso):
		fix = fmt.Sprintf("install librados2 and librbd1 (Ceph 16.2 or later) on %s, as OpenNebula's Ceph datastores need them there", host)
	default:
		fix = fmt.Sprintf("install the rbdfence and rbdfence-host packages built for %s on %s: the host step then runs its %s instead of the synced binary (README: Host platforms)", built, host, orPath(o.HostPackageBinary))
	}
	return briefErrorf(outcome.Unavailable, vm, "rbdfence cannot start on "+host+"; fix in the VM log", "%s; fix: %s", msg, fix)
}

func orPath(p string) string {
	if p == "" {
		return "package binary (set opennebula.host_package_binary: /usr/bin/rbdfence)"
	}
	return p
}

var (
	glibcRe  = regexp.MustCompile("version .(GLIBC_[0-9.]+). not found")
	sharedRe = regexp.MustCompile(`error while loading shared libraries: ([^:]+): cannot open`)
	symbolRe = regexp.MustCompile(`symbol lookup error: .*undefined symbol: ([^\s,]+)`)
)

// loaderReason shortens the dynamic loader's complaint to its reason.
func loaderReason(why string) string {
	if m := glibcRe.FindStringSubmatch(why); m != nil {
		return m[1] + " not found"
	}
	if m := sharedRe.FindStringSubmatch(why); m != nil {
		return m[1] + " not found"
	}
	if m := symbolRe.FindStringSubmatch(why); m != nil {
		return "undefined symbol " + m[1] + ": the host's library is older than the one it was built with"
	}
	if strings.Contains(why, "Exec format error") {
		return "exec format error: built for another architecture"
	}
	return orDash(why)
}
