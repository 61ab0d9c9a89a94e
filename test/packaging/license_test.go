package packaging_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestLicense: every package says Apache-2.0 and carries the copyright file
// (rbdfence and each Go module linked into its binaries): the .deb as
// /usr/share/doc/<pkg>/copyright, the .rpm as %license files beside LICENSE.
func TestLicense(t *testing.T) {
	needRPM(t)
	p := release(t)
	root := testenv.Root()
	want, errOut, code := run(t, root, nil, "bash", filepath.Join(root, "packaging/copyright.sh"))
	if code != 0 {
		t.Fatalf("packaging/copyright.sh: exit %d: %s", code, errOut)
	}
	for _, s := range []string{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", "Files: *\nCopyright: 2026 The rbdfence authors\nLicense: Apache-2.0",
		"Files: vendor/github.com/ceph/go-ceph/*", "Files: vendor/go/*", "License: MIT\n", "Permission is hereby granted"} {
		if !strings.Contains(want, s) {
			t.Fatalf("the copyright file does not say %q", s)
		}
	}
	license := string(readFile(t, filepath.Join(root, "LICENSE")))
	if !strings.Contains(license, "Apache License\n                           Version 2.0, January 2004") || !strings.Contains(license, "END OF TERMS AND CONDITIONS") {
		t.Fatal("LICENSE is not the full Apache License 2.0")
	}
	for _, name := range []string{"rbdfence", "rbdfence-frontend", "rbdfence-host"} {
		got, err := exec.Command("sh", "-c", `dpkg-deb --fsys-tarfile "$1" | tar -xOf - "./usr/share/doc/$2/copyright"`, "sh", p.deb[name], name).Output()
		if err != nil || string(got) != want {
			t.Fatalf("%s.deb: /usr/share/doc/%s/copyright is not the copyright file (%v, %d bytes)", name, name, err, len(got))
		}
		if l := rpmQuery(t, p.rpm[name], "--qf", "%{LICENSE}"); l != "Apache-2.0" {
			t.Fatalf("%s.rpm: License %q", name, l)
		}
		files := rpmDump(t, p.rpm[name])
		for _, f := range []struct{ path, body string }{{"LICENSE", license}, {"copyright", want}} {
			path := "/usr/share/licenses/" + name + "/" + f.path
			if got, ok := files[path]; !ok || got.mode != "0100644" {
				t.Fatalf("%s.rpm: %s missing or not 0644: %+v", name, path, got)
			}
			if lf := rpmQuery(t, p.rpm[name], "--licensefiles"); !strings.Contains(lf, path) {
				t.Fatalf("%s.rpm: %s is not a %%license file:\n%s", name, path, lf)
			}
		}
	}
}
