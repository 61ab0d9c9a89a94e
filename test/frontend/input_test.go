package frontend_test

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/onedsim"
)

// TestBadInput: unknown VMs, VMs without RBD disks, malformed stdin and
// missing arguments give a clear one-line error (or nothing to do), never
// a panic, never a host step, never the remote action.
func TestBadInput(t *testing.T) {
	f := setup(t)
	a := f.hs.A
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	prestart := filepath.Join(f.remotes, "rbdfence/prestart")

	// A VM whose disks QEMU opens as local copies (SSH-mode system DS) and
	// one with no disk at all.
	sshVM, noDiskVM := newVMID(), newVMID()
	for _, v := range []onedsim.VM{
		{ID: sshVM, Host: a.Name, HostID: 1, Seq: 0, TMMadSystem: "ssh", Disks: []onedsim.Disk{{ID: 0, ImageID: 1}, {ID: 1, Volatile: true}}},
		{ID: noDiskVM, Host: a.Name, HostID: 1, Seq: 0},
	} {
		if err := f.sim.Put(v); err != nil {
			t.Fatal(err)
		}
	}
	unknown := newVMID()
	vm, specs := f.newVM(a.Name, 0, "clone")
	local, _, domain := f.deployFiles(vm, 0, specs)
	deploy := f.vmm("deploy-rbdfence")

	for _, tc := range []struct {
		name  string
		prog  string
		stdin string
		args  []string
		code  int
		says  string // in the one plain line ("" for success)
	}{
		{"unknown VM", prestart, "", []string{fmt.Sprint(unknown)}, 2, "does not exist"},
		{"deploy of an unknown VM", deploy, b64(strings.ReplaceAll(domain, fmt.Sprintf("one-%d", vm), fmt.Sprintf("one-%d", unknown))), []string{local, a.Name, fmt.Sprint(unknown), a.Name}, 2, "does not exist"},
		{"VM with SSH-mode disks", prestart, "", []string{fmt.Sprint(sshVM)}, 0, ""},
		{"VM without disks", prestart, "", []string{fmt.Sprint(noDiskVM), a.Name}, 0, ""},
		{"prestart no args", prestart, "", nil, 2, "usage: prestart"},
		{"prestart bad id", prestart, "", []string{"42x"}, 2, "not a non-negative integer"},
		{"prestart bad host", prestart, "", []string{fmt.Sprint(vm), "-oProxyCommand=touch /tmp/x"}, 2, "not a host name"},
		{"deploy no args", deploy, b64(domain), nil, 2, "usage: deploy-rbdfence"},
		{"deploy missing host", deploy, b64(domain), []string{local}, 2, "wrong number of arguments"},
		{"deploy not base64", deploy, "<domain>", []string{local, a.Name, fmt.Sprint(vm), a.Name}, 2, "not base64"},
		{"deploy empty stdin", deploy, "", []string{local, a.Name, fmt.Sprint(vm), a.Name}, 2, "stdin is empty"},
		{"deploy not XML", deploy, b64("<domain><name>one-1</name>"), []string{local, a.Name, fmt.Sprint(vm), a.Name}, 2, "domain XML"},
		{"deploy another VM's domain", deploy, b64(strings.ReplaceAll(domain, fmt.Sprintf("one-%d", vm), "one-1")), []string{local, a.Name, fmt.Sprint(vm), a.Name}, 2, "another VM's"},
		{"restore no args", f.vmm("restore-rbdfence"), "", nil, 2, "usage: restore-rbdfence"},
		{"restore not XML", f.vmm("restore-rbdfence"), b64("not xml"), []string{"/var/lib/one/datastores/0/1/checkpoint", a.Name, "u", fmt.Sprint(vm), a.Name}, 2, "driver action"},
		{"restore wrong document", f.vmm("restore-rbdfence"), b64("<VM/>"), []string{"/var/lib/one/datastores/0/1/checkpoint", a.Name, "u", fmt.Sprint(vm), a.Name}, 2, "VMM_DRIVER_ACTION_DATA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sshBefore, deploysBefore := len(f.sshCalls()), len(f.calls("deploy"))
			r := f.run(tc.prog, tc.stdin, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", r.code, tc.code, r.stderr)
			}
			plain := r.plainLines()
			if tc.says == "" {
				if len(plain) != 0 {
					t.Fatalf("plain stderr lines on success: %q", plain)
				}
			} else if len(plain) != 1 || !strings.Contains(plain[0], tc.says) {
				t.Fatalf("want one plain line saying %q, got:\n%s", tc.says, r.stderr)
			}
			if n := len(f.sshCalls()) - sshBefore; n != 0 {
				t.Errorf("%d ssh call(s): %q", n, f.sshCalls()[sshBefore:])
			}
			if len(f.calls("deploy")) != deploysBefore {
				t.Error("the remote deploy ran")
			}
		})
	}

	// The deploy of a VM without RBD disks is a normal deploy: no host
	// step, but the remote deploy runs.
	t.Run("deploy without RBD disks", func(t *testing.T) {
		sshBefore := len(f.sshCalls())
		l, _, d := f.deployFiles(noDiskVM, 0, nil)
		r := f.run(deploy, b64(d), l, a.Name, fmt.Sprint(noDiskVM), a.Name)
		if r.code != 0 || strings.TrimSpace(r.stdout) != deployID {
			t.Fatalf("exit %d stdout %q\n%s", r.code, r.stdout, r.stderr)
		}
		for _, c := range f.sshCalls()[sshBefore:] {
			if strings.Contains(c, "rbdfence-host") {
				t.Fatalf("a host step ran for a VM without RBD disks: %s", c)
			}
		}
	})

	// The migrate action refuses bad input with one plain line, before
	// the real migration starts.
	t.Run("migrate action", func(t *testing.T) {
		for _, tc := range []struct {
			stdin string
			args  []string
		}{
			{"", nil},
			{"%%% not base64", []string{"one-1", "rbdf-b", a.Name, fmt.Sprint(vm), a.Name}},
			{b64("<VM><ID>1</ID></VM>"), []string{"one-1", "rbdf-b", a.Name, fmt.Sprint(vm), a.Name}},
			{b64("<VMM_DRIVER_ACTION_DATA><VM><ID>1</ID>"), []string{"one-1", "rbdf-b", a.Name, fmt.Sprint(vm), a.Name}},
			{b64("<VMM_DRIVER_ACTION_DATA/>"), []string{"one-1", "-oProxyCommand=x", a.Name, fmt.Sprint(vm), a.Name}},
		} {
			r := f.run(f.vmm("migrate-rbdfence"), tc.stdin, tc.args...)
			if r.code != 2 || len(r.plainLines()) != 1 {
				t.Errorf("%q: exit %d, want 2 with one plain line\n%s", tc.args, r.code, r.stderr)
			}
		}
		if n := len(f.calls("migrate")); n != 0 {
			t.Fatalf("the remote migrate ran %d time(s) on bad input", n)
		}
	})
}
