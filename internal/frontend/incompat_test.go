package frontend

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// The dynamic loader's and the shell's own words, as measured in a Debian
// 11 chroot with a Debian 12 build (README: Host platforms).
const (
	ldGlibc   = "/var/tmp/one/rbdfence/rbdfence-host: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by /var/tmp/one/rbdfence/rbdfence-host)"
	ldRados   = "/var/tmp/one/rbdfence/rbdfence-host: error while loading shared libraries: librados.so.2: cannot open shared object file: No such file or directory"
	shFormat  = "sh: 1: /var/tmp/one/rbdfence/rbdfence-host: Exec format error"
	stepError = "host step request: not valid JSON"
)

func TestCannotStart(t *testing.T) {
	for _, tc := range []struct {
		code   int
		why    string
		want   bool
		reason string
	}{
		{1, ldGlibc, true, "GLIBC_2.34 not found"},
		{127, ldRados, true, "librados.so.2 not found"},
		{126, shFormat, true, "exec format error: built for another architecture"},
		// A Debian 11 build against Pacific's headers on Debian 11's own librados2 14.2.21.
		{127, "/usr/bin/rbdfence: symbol lookup error: /usr/bin/rbdfence: undefined symbol: _ZN4ceph6buffer7v15_2_04list17always_empty_bptrE, version LIBRADOS_14.2.0", true,
			"undefined symbol _ZN4ceph6buffer7v15_2_04list17always_empty_bptrE: the host's library is older than the one it was built with"},
		{2, stepError, false, stepError},
		{3, "VM 42: Ceph unreachable", false, "VM 42: Ceph unreachable"},
	} {
		if got := cannotStart(tc.code, tc.why); got != tc.want {
			t.Errorf("%d %q: %v", tc.code, tc.why, got)
		}
		if got := loaderReason(tc.why); got != tc.reason {
			t.Errorf("%q: reason %q, want %q", tc.why, got, tc.reason)
		}
	}
}

func TestParseProbe(t *testing.T) {
	h := parseProbe([]byte("os=Debian GNU/Linux 11 (bullseye)\narch=x86_64\nglibc=glibc 2.31\ndpkg=ii  14.2.21-1\nrpm=package librados2 is not installed\nlibso=1\nrbd=\nrbdso=0\nran=/var/tmp/one/rbdfence/rbdfence-host\n"))
	if got := h.String(); got != "Debian GNU/Linux 11 (bullseye), x86_64, glibc 2.31, librados2 14.2.21-1, no librbd.so.1" || h.ran != "/var/tmp/one/rbdfence/rbdfence-host" {
		t.Fatalf("%q %+v", got, h)
	}
	h = parseProbe([]byte("os=Rocky Linux 8.9 (Green Obsidian)\narch=x86_64\nglibc=glibc 2.28\ndpkg=\nrpm=16.2.4-5.el8\nlibso=1\nrbd=\nrbdrpm=16.2.4-5.el8\nrbdso=1\n"))
	if got := h.String(); got != "Rocky Linux 8.9 (Green Obsidian), x86_64, glibc 2.28, librados2 16.2.4-5.el8, librbd1 16.2.4-5.el8" {
		t.Fatalf("%q", got)
	}
	// Debian with rpm installed (rpm's "not installed" is on stdout); the
	// synced binary absent.
	h = parseProbe([]byte("os=Debian GNU/Linux 12 (bookworm)\narch=x86_64\nglibc=glibc 2.36\ndpkg=ii  16.2.15+ds-0+deb12u2\nrpm=package librados2 is not installed\nlibso=1\nrbd=ii  16.2.15+ds-0+deb12u2\nrbdrpm=package librbd1 is not installed\nrbdso=1\nran=/var/tmp/one/rbdfence/rbdfence-host\nrunnable=no\n"))
	if got := h.String(); got != "Debian GNU/Linux 12 (bookworm), x86_64, glibc 2.36, librados2 16.2.15+ds-0+deb12u2, librbd1 16.2.15+ds-0+deb12u2" || !h.absent {
		t.Fatalf("%q %+v", got, h)
	}
	if got := parseProbe([]byte("os=\narch=aarch64\nglibc=\nlibso=0\n")).String(); got != "aarch64, no glibc, no librados.so.2, no librbd.so.1" {
		t.Fatalf("%q", got)
	}
}

// TestReadNeeds reads a real ELF file of this machine (a glibc program).
func TestReadNeeds(t *testing.T) {
	n, err := readNeeds("/bin/true")
	if err != nil || n.glibc == "" || n.librados || n.arch == "" {
		t.Fatalf("%+v %v", n, err)
	}
	if _, err := readNeeds("/etc/hostname"); err == nil {
		t.Fatal("not an ELF file")
	}
	for _, tc := range []struct {
		a, b string
		less bool
	}{{"", "2.2.5", true}, {"2.2.5", "2.34", true}, {"2.34", "2.4", false}, {"2.34", "2.34", false}, {"2.31", "2.34", true}} {
		if versionLess(tc.a, tc.b) != tc.less {
			t.Errorf("%s < %s: %v", tc.a, tc.b, !tc.less)
		}
	}
}

// TestHostArgv runs the remote command through a real shell as sshd does:
// the package binary where it is executable, else the synced one; none
// configured: the synced one, without a shell.
func TestHostArgv(t *testing.T) {
	dir := t.TempDir()
	bin := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+name+" \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pkg, synced := bin("package"), bin("synced")
	for _, tc := range []struct {
		name, pkg, want string
	}{
		{"package installed", pkg, "package host --config /c y's"},
		{"no package", filepath.Join(dir, "absent"), "synced host --config /c y's"},
		{"package not executable", filepath.Join(dir, "plain"), "synced host --config /c y's"},
		{"none configured", "", "synced host --config /c y's"},
	} {
		os.WriteFile(filepath.Join(dir, "plain"), []byte("x"), 0o644)
		cfg := config.Default()
		cfg.OpenNebula.HostBinary, cfg.OpenNebula.HostPackageBinary = synced, tc.pkg
		argv := (&Env{Cfg: cfg}).hostArgv("host", "--config", "/c y's")
		if tc.pkg == "" && argv[0] != synced {
			t.Errorf("%s: %q", tc.name, argv)
		}
		out, err := exec.Command("sh", "-c", shellJoin(argv)).Output()
		if err != nil || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.name, out, err, tc.want)
		}
	}
}

// TestHostBinaryAbsent: a host where onehost sync has not put the host
// binary (or put it without its mode) is no incompatible host: the shell's
// "not found" (127) or "Permission denied" (126) is said as such, with
// onehost sync as the fix, not a platform mismatch.
func TestHostBinaryAbsent(t *testing.T) {
	req := &hoststep.Request{Op: hoststep.OpCheck, VM: 42, Seq: 3, Host: "node1", Run: "r", Source: "frontend",
		Disks: []vmdisk.Disk{{ID: "0", Pool: "one", Name: "one-7-42-0"}}}
	for _, tc := range []struct {
		name string
		brk  func(bin string)
	}{
		{"missing", func(bin string) { os.Remove(bin) }},
		{"not executable", func(bin string) { os.Chmod(bin, 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStub(t, "premigrate", false)
			bin := s.env.Cfg.OpenNebula.HostBinary
			tc.brk(bin)
			_, err := s.env.hostStep(t.Context(), "node1", req, onHost)
			var fe *Error
			want := fmt.Sprintf("host node1 has no runnable rbdfence host binary %s (", bin)
			fix := "; fix: run 'onehost sync --force' as oneadmin on the front-end (it copies the host binary to node1), or install the rbdfence and rbdfence-host packages on node1"
			if !errors.As(err, &fe) || fe.Kind != outcome.Unavailable || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), fix) {
				t.Fatalf("%v\nwant %q ... %q", err, want, fix)
			}
		})
	}
}
