package packaging_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestVersion: package.sh turns `git describe` into versions that dpkg and
// rpm accept and order by release, then by commits since it; the packages
// built from this tree carry the version of its HEAD.
func TestVersion(t *testing.T) {
	needRPM(t)
	sanitize := func(describe string) string {
		t.Helper()
		out, errOut, code := run(t, "", nil, "bash", packageScript(), "--sanitize-version", describe)
		if code != 0 {
			t.Fatalf("--sanitize-version %q: exit %d: %s", describe, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	// In ascending order.
	cases := []struct{ describe, want string }{
		{"v0.0.0-3-g0123abc", "0.0.0+3.g0123abc"},
		{"v0.0.0-3-g0123abc-dirty", "0.0.0+3.g0123abc.dirty"},
		{"v0.0.0-41-g89abcde", "0.0.0+41.g89abcde"},
		{"v1.2.0-rc1-0-gabc1234", "1.2.0~rc1"},
		{"v1.2.0-rc1-2-gabc1234", "1.2.0~rc1+2.gabc1234"},
		{"v1.2.0-0-gabc1234", "1.2.0"},
		{"v1.2.0-0-gabc1234-dirty", "1.2.0+0.gabc1234.dirty"},
		{"v1.2.0-4-gdef5678", "1.2.0+4.gdef5678"},
		{"v1.2.0-10-g0000001", "1.2.0+10.g0000001"},
		{"v1.2.1", "1.2.1"},
		{"v1.10.0", "1.10.0"},
	}
	// Odd input (a --version, a tag with odd characters): still valid.
	odd := []struct{ describe, want string }{
		{"v2.0_beta/x-0-g1234567", "2.0.beta.x"},
		{"nightly", "0.0.0+nightly"},
		{"2.1-2-gabcdef0", "2.1+2.gabcdef0"},
	}
	valid := regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)
	var prev string
	for i, c := range append(cases, odd...) {
		got := sanitize(c.describe)
		if got != c.want {
			t.Fatalf("%q -> %q, want %q", c.describe, got, c.want)
		}
		if !valid.MatchString(got) {
			t.Fatalf("%q: %q has characters rpm or dpkg reject", c.describe, got)
		}
		if _, errOut, code := run(t, "", nil, "dpkg", "--validate-version", got+"-1"); code != 0 {
			t.Fatalf("dpkg rejects %q: %s", got, errOut)
		}
		if i >= len(cases) {
			continue
		}
		if prev != "" {
			if _, _, code := run(t, "", nil, "dpkg", "--compare-versions", prev, "lt", got); code != 0 {
				t.Fatalf("dpkg: %s is not before %s", prev, got)
			}
			out, errOut, code := run(t, "", nil, "rpm", "--eval", `%{lua: print(rpm.vercmp("`+prev+`", "`+got+`"))}`)
			if code != 0 || strings.TrimSpace(out) != "-1" {
				t.Fatalf("rpm: %s is not before %s: %q %s", prev, got, out, errOut)
			}
		}
		prev = got
	}

	// The packages of this tree: its HEAD's version.
	p := release(t)
	if p.version != strings.TrimSpace(mustRun(t, "bash", packageScript(), "--print-version")) {
		t.Fatalf("packages carry %s, --print-version says otherwise", p.version)
	}
	head := strings.TrimSpace(mustRun(t, "git", "-C", testenv.Root(), "rev-parse", "--short=7", "HEAD"))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+`).MatchString(p.version) ||
		(strings.Contains(p.version, ".g") && !strings.Contains(p.version, ".g"+head)) {
		t.Fatalf("package version %q is not made from HEAD %s", p.version, head)
	}
	if v := rpmQuery(t, p.rpm["rbdfence"], "--qf", "%{VERSION}"); v != p.version {
		t.Fatalf("rpm version %q, want %q", v, p.version)
	}
	if out := mustRun(t, "dpkg-deb", "-f", p.deb["rbdfence"], "Version"); strings.TrimSpace(out) != p.version+"-1" {
		t.Fatalf("deb version %q, want %q", out, p.version+"-1")
	}
}

// packageScript is packaging/package.sh.
func packageScript() string { return filepath.Join(testenv.Root(), "packaging/package.sh") }
