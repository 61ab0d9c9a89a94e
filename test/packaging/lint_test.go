package packaging_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestLintian: lintian finds no error in the .deb packages, and every
// override the packages ship is used (each one says why in
// packaging/debian/*.lintian-overrides).
func TestLintian(t *testing.T) {
	if _, err := exec.LookPath("lintian"); err != nil {
		t.Fatal("lintian not found: test/deps.sh installs it")
	}
	t.Parallel()
	p := release(t)
	args := []string{"--tag-display-limit", "0", "--display-info"}
	for _, name := range pkgNames {
		args = append(args, p.deb[name])
	}
	// lintian leaves its ELF cache (mldbm-elf-*) in TMPDIR.
	out, errOut, code := run(t, "", []string{"TMPDIR=" + t.TempDir()}, "lintian", args...)
	t.Logf("lintian: exit %d\n%s", code, out)
	if errs := regexp.MustCompile(`(?m)^E: .*$`).FindAllString(out, -1); len(errs) > 0 || code != 0 {
		t.Fatalf("lintian: exit %d, errors:\n%s\n%s", code, strings.Join(errs, "\n"), errOut)
	}
	if strings.Contains(out, "unused-override") || strings.Contains(out, "mismatched-override") {
		t.Fatalf("lintian: an override that is not used:\n%s", out)
	}
}

// TestRPMLint: rpmlint finds no error in the .rpm packages with
// packaging/rpmlintrc, whose every filter says why and is used.
func TestRPMLint(t *testing.T) {
	needRPM(t)
	t.Parallel()
	p := release(t)
	args := []string{"-r", filepath.Join(testenv.Root(), "packaging/rpmlintrc")}
	for _, name := range pkgNames {
		args = append(args, p.rpm[name])
	}
	out, errOut, code := run(t, "", nil, "rpmlint", args...)
	t.Logf("rpmlint: exit %d\n%s%s", code, out, errOut)
	if code != 0 || !regexp.MustCompile(`(?m) 0 errors, \d+ warnings`).MatchString(out) || strings.Contains(out, "unused-rpmlintrc-filter") {
		t.Fatalf("rpmlint: exit %d\n%s%s", code, out, errOut)
	}
}
