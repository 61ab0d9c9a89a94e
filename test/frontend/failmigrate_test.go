package frontend_test

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirttest "github.com/rbdfence/rbdfence/test/libvirt"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// hostLibvirt makes every host step (on both test hosts) ask libvirt at
// uri: the host binary runs under LIBVIRT_DEFAULT_URI=uri.
func (f *fe) hostLibvirt(uri string) {
	f.t.Helper()
	hostBin := filepath.Join(f.remotes, "rbdfence/rbdfence-host")
	wrapper := f.path("rbdfence-host")
	f.write(wrapper, fmt.Sprintf("#!/bin/sh\nLIBVIRT_DEFAULT_URI='%s' exec %s \"$@\"\n", uri, hostBin), 0o755)
	f.write(f.cfgPath, strings.Replace(readFile(f.t, f.cfgPath), "host_binary: "+hostBin, "host_binary: "+wrapper, 1), 0o644)
}

// sourceRunsVM makes the source's libvirt say what it says after a failed
// live migration: one-<vm> runs there with no job. The machine's libvirtd
// answers (libvirt's test driver has no job information); the domain goes
// when the test ends.
func (f *fe) sourceRunsVM(vm int) {
	f.t.Helper()
	lv := libvirttest.StartLibvirt(f.t)
	f.hostLibvirt(lv.URI)
	libvirttest.Create(f.t, libvirttest.DomainXML(fmt.Sprintf("one-%d", vm), lv.DomType, nil))
}

// TestFailmigrateOnDestinationAsksSource: a failed live migration's
// failmigrate on the destination fences the copy there only once the
// source's libvirt (asked read-only by the front-end's "domain" step
// there) says one-N runs with no job. A retried migration (`onevm recover
// --retry` of a migration whose action oned abandoned,
// LifeCycleActions.cc:1796-1797 of release-7.4.0) fails at once while the
// first attempt's job may still complete onto the destination: libvirt
// not answering, hung, or not saying whether a job runs, and a source
// without one-N, fence nothing, keep the window, and say what to check
// (issue 18, model-C).
func TestFailmigrateOnDestinationAsksSource(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	vm, specs := f.newVM(a.Name, 1, "persistent")
	if r := f.deployVM(vm, 1, a.Name, specs); r.code != 0 {
		t.Fatalf("deploy: %d\n%s", r.code, r.stderr)
	}
	src := testenv.StartZombieOn(t, f.ceph, a, specs[0].image, "write")
	src.WaitWrite(t, true, 30*time.Second)
	// The first attempt's incoming copy on the destination.
	copyOnB := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "write")
	copyOnB.WaitWrite(t, true, 30*time.Second)
	f.write(f.path("remote-calls", "migrate.fail"), "", 0o644)

	// A libvirtd that accepts and never answers (timeouts.connect bounds
	// each virsh).
	hung := f.path("hung.sock")
	ln, err := net.Listen("unix", hung)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	// libvirt's test driver runs one-N and has no job information.
	node := f.path("node.xml")
	f.write(node, fmt.Sprintf("<node><domain type='test'><name>one-%d</name><memory>65536</memory><os><type>hvm</type></os></domain></node>\n", vm), 0o644)

	for _, tc := range []struct{ name, uri, said string }{
		{"libvirtd down", "qemu+unix:///system?socket=" + f.path("no-libvirtd.sock"), "did not answer (virsh domstate: exit status 1: error: failed to connect to the hypervisor"},
		{"libvirtd hung", "qemu+unix:///system?socket=" + hung, fmt.Sprintf("did not answer (virsh domstate one-%d: no answer within 5s)", vm)},
		{"no job information", "test://" + node, "did not answer about the domain's job (virsh domjobinfo:"},
		{"no one-N on the source", "test:///default", "says the domain is not running there (has no such domain): the migration may have completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.t = t
			f.hostLibvirt(tc.uri)
			f.migrating(vm, 1, a.Name, b.Name, specs)
			start := time.Now()
			r, _ := f.migrateRun(vm, a.Name, b.Name)
			want := fmt.Sprintf("cannot tell whether the migration of one-%d from %s still runs: libvirt on %s %s", vm, a.Name, a.Name, tc.said)
			if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "nothing was fenced") || !strings.Contains(r.stderr, "virsh -r domjobinfo one-") {
				t.Fatalf("failmigrate on the destination: exit %d, want the migration's 1 saying %q\n%s", r.code, want, r.stderr)
			}
			if took := time.Since(start); took > 60*time.Second {
				t.Fatalf("the refusal took %s", took)
			}
			copyOnB.WaitWrite(t, true, 30*time.Second)
			if _, ok := f.ceph.BlocklistEntries(t)[copyOnB.Addr]; ok {
				t.Fatal("the copy on the destination was fenced without the source's libvirt's word")
			}
			if c := f.claim(vm); c.Host != a.Name || c.Window == nil || c.Window.Dst != b.Name {
				t.Fatalf("the claim must keep its window %s -> %s: %+v", a.Name, b.Name, c)
			}
		})
	}
	f.t = t

	// The source's libvirt says one-N runs there with no job: the copy on
	// the destination is fenced, the source kept, the window closed.
	f.sourceRunsVM(vm)
	f.migrating(vm, 1, a.Name, b.Name, specs)
	r, _ := f.migrateRun(vm, a.Name, b.Name)
	if r.code != 1 || strings.Contains(r.stderr, "cannot tell") {
		t.Fatalf("failed migration, source running with no job: exit %d, want the migration's 1 and the fence\n%s", r.code, r.stderr)
	}
	if ev := copyOnB.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the copy on the destination: errno %d, want 108", ev.Errno)
	}
	src.WaitWrite(t, true, 30*time.Second)
	if _, ok := f.ceph.BlocklistEntries(t)[src.Addr]; ok {
		t.Fatal("the source was fenced")
	}
	if c := f.claim(vm); c.Host != a.Name || c.Window != nil {
		t.Fatalf("claim after the failed migration: %+v", c)
	}
}
