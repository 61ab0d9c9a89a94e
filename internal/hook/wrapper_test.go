package hook

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrapperRunsHookOnlyForItsOps: the qemu.d wrapper the installer
// writes (packaging/files/10-rbdfence) starts the hook binary for exactly
// the calls Dispatch acts on, and answers every other call itself, exit 0,
// having read libvirt's domain XML to its end.
func TestWrapperRunsHookOnlyForItsOps(t *testing.T) {
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "packaging", "files", "10-rbdfence"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	hook := filepath.Join(dir, "rbdfence-hook")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\ncat >/dev/null\necho \"$*\" >>"+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "10-rbdfence")
	body := strings.ReplaceAll(strings.ReplaceAll(string(tmpl), "@HOOK@", hook), "@OPTIONS@", " --config /x.yaml")
	if err := os.WriteFile(wrapper, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	// libvirt's qemu hook calls (docs/hooks.rst of libvirt 9.0).
	xml := bytes.Repeat([]byte("<domain>x</domain>\n"), 20000) // beyond a pipe's buffer
	for _, c := range [][2]string{
		{"prepare", "begin"}, {"start", "begin"}, {"started", "begin"}, {"stopped", "end"}, {"release", "end"},
		{"migrate", "begin"}, {"restore", "begin"}, {"reconnect", "begin"}, {"attach", "begin"},
	} {
		os.Remove(calls)
		cmd := exec.Command(wrapper, "one-7", c[0], c[1], "-")
		cmd.Stdin = bytes.NewReader(xml)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
			t.Fatalf("%s %s: %v %q", c[0], c[1], err, out)
		}
		b, _ := os.ReadFile(calls)
		ran := len(b) > 0
		if want := Dispatch(Invocation{Domain: "one-7", Op: c[0], SubOp: c[1]}) != ActNone; ran != want {
			t.Errorf("%s %s: hook binary ran %v, want %v (Dispatch)", c[0], c[1], ran, want)
		}
		if ran && string(b) != "--config /x.yaml -- one-7 "+c[0]+" "+c[1]+" -\n" {
			t.Errorf("%s %s: hook argv %q", c[0], c[1], b)
		}
	}
}
