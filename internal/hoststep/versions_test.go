package hoststep

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

func TestParseHookVersion(t *testing.T) {
	for _, tc := range []struct {
		out     string
		version string
		format  int
		err     bool
	}{
		{HookVersionLine("1.2.3"), "1.2.3", engine.ClaimFormat, false},
		// The hook of rbdfence up to 0300e58 (hooks/rbdfence-hook/main.go there).
		{"rbdfence-hook 0300e58\n", "0300e58", 0, false},
		{"rbdfence-hook 0300e58-dirty (claim format 7)\n", "0300e58-dirty", 7, false},
		{"librados: noise\nrbdfence-hook v1 (claim format 2)\n", "v1", 2, false},
		{"usage: ...", "", 0, true},
		{"", "", 0, true},
		{"rbdfence-hook a b", "", 0, true},
	} {
		v, f, err := ParseHookVersion(tc.out)
		if v != tc.version || f != tc.format || (err != nil) != tc.err {
			t.Errorf("%q: %q %d %v", tc.out, v, f, err)
		}
	}
}

// TestCheckVersions: a start (withHook) or incoming migration is refused on
// a host whose host step or hook reads an older claim format than the
// front-end's, with the fix that fits how that host got its rbdfence; a
// host without a hook, or with current ones, passes.
func TestCheckVersions(t *testing.T) {
	step := func(path string, f int) Binary {
		return Binary{Path: path, Version: "v", Protocol: Version, ClaimFormat: f}
	}
	synced := "/var/tmp/one/rbdfence/rbdfence-host"
	for _, tc := range []struct {
		name     string
		v        *Versions
		withHook bool
		want     []string // in the error; none: passes
	}{
		{"current, package hook", &Versions{Step: step(synced, 2), Hook: &Binary{Path: PackageHook, Version: "v", ClaimFormat: 2}}, true, nil},
		{"no hook installed", &Versions{Step: step(synced, 2)}, true, nil},
		{"old hook, not checked", &Versions{Step: step(synced, 2), Hook: &Binary{Path: PackageHook, Version: "0300e58"}}, false, nil},
		{"old package hook", &Versions{Step: step(synced, 2), Hook: &Binary{Path: PackageHook, Version: "0300e58"}}, true,
			[]string{"host h1: its libvirt hook " + PackageHook + " (0300e58) reads claim format 1, older than claim format 2", "fix: upgrade the rbdfence and rbdfence-host packages on h1", "onehost sync --force"}},
		{"old installer hook", &Versions{Step: step(PackageBinary, 2), Hook: &Binary{Path: "/usr/local/libexec/rbdfence/rbdfence-hook", Version: "0300e58"}}, true,
			[]string{"fix: run this release's 'install.sh host' on h1"}},
		{"hook that cannot say", &Versions{Step: step(synced, 2), Hook: &Binary{Path: PackageHook, Error: "exit status 2"}}, true,
			[]string{"cannot tell which claim format its hook", "exit status 2"}},
		{"old step", &Versions{Step: step(synced, 1)}, false, []string{"its host step " + synced + " (v) reads claim format 1"}},
		{"no versions", nil, false, []string{"reports no versions", "claim format 2", "upgrade the rbdfence and rbdfence-host packages on h1", "onehost sync --force"}},
	} {
		err := CheckVersions("h1", tc.v, 2, tc.withHook)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var se *SkewError
		if !errors.As(err, &se) || outcome.Of(err) != outcome.Unavailable || strings.Contains(err.Error(), "\n") {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}

// TestReplyVersions: Versions go only to a peer that knows them (version
// 4); a version 1 peer rejects unknown fields.
func TestReplyVersions(t *testing.T) {
	for _, pv := range []int{0, 2, 3, Version} {
		r := Reply(&Request{Version: pv}, &Response{OK: true, Versions: &Versions{Step: Binary{Path: "/x"}}})
		if (r.Versions != nil) != (pv >= 4) {
			t.Errorf("peer version %d: versions %v", pv, r.Versions)
		}
	}
}

func TestUnknownClaimFormatFlag(t *testing.T) {
	// What `rbdfence host` of 0300e58 answers to the flag (parseFlags there).
	old := &Response{Kind: outcome.Usage, Error: "host: flag provided but not defined: -min-claim-format (try: rbdfence help)"}
	if !old.UnknownClaimFormatFlag() {
		t.Fatal("not recognised")
	}
	if (&Response{Kind: outcome.Usage, Error: "host: flag provided but not defined: -framed"}).UnknownClaimFormatFlag() {
		t.Fatal("another flag taken for it")
	}
}

// TestFrameAdmitsVersions: a one-session start runs its action only for an
// admitting answer of a host that reads this build's claim format.
func TestFrameAdmitsVersions(t *testing.T) {
	cur := `{"step":{"path":"/x","protocol":4,"claim_format":` + strconv.Itoa(engine.ClaimFormat) + `}}`
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"version":4,"op":"start","ok":true,"versions":` + cur + `}`, true},
		{`{"version":3,"op":"start","ok":true}`, false}, // no versions: an rbdfence up to 0300e58
		{`{"version":4,"op":"start","ok":true,"versions":{"step":{"path":"/x","claim_format":1}}}`, false},
		{`{"version":4,"op":"start","ok":false,"error":"no","versions":` + cur + `}`, false},
	} {
		if got := FrameAdmits([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %v", tc.body, got)
		}
	}
}
