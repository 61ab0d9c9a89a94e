package hoststep

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Versions is what runs on a host, as the host step found it: the host
// step itself, the libvirt hook beside it and, in the answer to OpVersions,
// the rbdfence packages and the platform. Every version 4 response carries
// it (Response.Versions).
type Versions struct {
	Step Binary `json:"step"`
	// Hook is the rbdfence hook libvirtd runs on the host; nil when none is
	// installed (no qemu.d/10-rbdfence, no legacy hook that runs it).
	Hook *Binary `json:"hook,omitempty"`
	// Packages are the rbdfence packages installed on the host (OpVersions).
	Packages []Package `json:"packages,omitempty"`
	// Platform is the host's userland (OpVersions).
	Platform *Platform `json:"platform,omitempty"`
}

// Binary is one rbdfence binary on a host as it reports itself.
type Binary struct {
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"` // its build (git describe)
	// Protocol is the host step's protocol version (Version); 0 for the hook.
	Protocol int `json:"protocol,omitempty"`
	// ClaimFormat is the claim format it reads and writes
	// (engine.ClaimFormat); 0 when it reports none (format 1).
	ClaimFormat int `json:"claim_format,omitempty"`
	// Error says why it could not be asked (the hook's --version failed).
	Error string `json:"error,omitempty"`
}

// Package is an installed package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Platform is what a host binary needs of its host.
type Platform struct {
	OS       string `json:"os,omitempty"`       // PRETTY_NAME of /etc/os-release
	Arch     string `json:"arch,omitempty"`     // uname -m
	Glibc    string `json:"glibc,omitempty"`    // e.g. "2.36"; "" when not glibc
	Librados string `json:"librados,omitempty"` // "librados2 <package version>", "librados.so.2" of no package, "" when absent
	// Librbd is librbd1 alike: the host step loads it to break a lock.
	Librbd string `json:"librbd,omitempty"`
}

// HookVersionLine is what `rbdfence-hook --version` prints: its build and
// the claim format it reads and writes. The host step parses it
// (ParseHookVersion); a hook of rbdfence up to 0300e58 prints
// "rbdfence-hook VERSION" alone (claim format 1).
func HookVersionLine(version string) string {
	return fmt.Sprintf("rbdfence-hook %s (claim format %d)", version, engine.ClaimFormat)
}

var hookVersionRe = regexp.MustCompile(`^rbdfence-hook (\S+)(?: \(claim format ([0-9]+)\))?$`)

// ParseHookVersion reads a hook's --version output: its version and claim
// format (0: it reports none).
func ParseHookVersion(out string) (version string, claimFormat int, err error) {
	line := strings.TrimSpace(out)
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = strings.TrimSpace(line[i+1:])
	}
	m := hookVersionRe.FindStringSubmatch(line)
	if m == nil {
		return "", 0, fmt.Errorf("--version printed %q, not \"rbdfence-hook VERSION\"", clip(line))
	}
	if m[2] != "" {
		claimFormat, err = strconv.Atoi(m[2])
		if err != nil {
			return "", 0, fmt.Errorf("--version printed claim format %q", clip(m[2]))
		}
	}
	return m[1], claimFormat, nil
}

// Package names and paths the fixes name.
const (
	// PackageBinary is the rbdfence package's CLI and host step on a host:
	// built for the host's distribution, it is preferred over the synced
	// one (opennebula.host_package_binary).
	PackageBinary = "/usr/bin/rbdfence"
	// PackageHook is where the rbdfence-host package puts the hook.
	PackageHook = "/usr/lib/rbdfence/bin/rbdfence-hook"
)

// SkewError refuses a start or a migration on a host whose hook or host
// step is older than the front-end's claim format (engine.ClaimFormat): it
// would misread the claim. Outcome Unavailable (exit 3): the start can be
// retried once the host is upgraded; fence.fail_open never passes it.
type SkewError struct {
	Host string
	Why  string // what is too old, with its version
	Fix  string
}

func (e *SkewError) Error() string {
	return fmt.Sprintf("host %s: %s; fix: %s", e.Host, e.Why, e.Fix)
}

// Brief: engine.Briefer.
func (e *SkewError) Brief() string {
	return fmt.Sprintf("%s's rbdfence is too old; upgrade, onehost sync", e.Host)
}

// Outcome: the start cannot be checked safely on that host yet.
func (e *SkewError) Outcome() outcome.Kind { return outcome.Unavailable }

// upgradeHost is the fix of a host whose rbdfence is older than the
// front-end's.
func upgradeHost(host string, v *Versions) string {
	var parts []string
	if v == nil || v.Hook == nil || strings.Contains(v.Hook.Path, "/usr/lib/rbdfence/") {
		parts = append(parts, "upgrade the rbdfence and rbdfence-host packages on "+host+" to the front-end's release (apt install / dnf upgrade)")
	} else {
		parts = append(parts, "run this release's 'install.sh host' on "+host+" (its hook is "+v.Hook.Path+")")
	}
	if v == nil || v.Step.Path != PackageBinary {
		parts = append(parts, "run 'onehost sync --force' as oneadmin on the front-end")
	}
	return strings.Join(parts, ", and ")
}

// CheckVersions refuses (*SkewError) a start or an incoming migration on
// host when what it reported (v; nil: the host step reports no versions, an
// rbdfence up to 0300e58) reads an older claim format than need: the host
// step that answered and, when withHook, the hook that libvirtd runs there.
func CheckVersions(host string, v *Versions, need int, withHook bool) error {
	if v == nil {
		return &SkewError{Host: host, Fix: upgradeHost(host, nil),
			Why: fmt.Sprintf("its rbdfence host step reports no versions (an rbdfence up to 0300e58: claim format 1), and neither does its hook; this front-end needs claim format %d", need)}
	}
	var fe *engine.ClaimFormatError
	who := fmt.Sprintf("its host step %s (%s)", v.Step.Path, orUnknown(v.Step.Version))
	if err := engine.CheckClaimFormat(who, v.Step.ClaimFormat, need); errors.As(err, &fe) {
		return &SkewError{Host: host, Why: err.Error(), Fix: upgradeHost(host, v)}
	}
	if !withHook || v.Hook == nil {
		return nil
	}
	if v.Hook.Error != "" {
		return &SkewError{Host: host, Fix: upgradeHost(host, v),
			Why: fmt.Sprintf("cannot tell which claim format its hook %s reads: %s", v.Hook.Path, v.Hook.Error)}
	}
	who = fmt.Sprintf("its libvirt hook %s (%s)", v.Hook.Path, orUnknown(v.Hook.Version))
	if err := engine.CheckClaimFormat(who, v.Hook.ClaimFormat, need); errors.As(err, &fe) {
		return &SkewError{Host: host, Why: err.Error(), Fix: upgradeHost(host, v)}
	}
	return nil
}

// ClaimFormatFlag is the flag of `rbdfence host` that carries the claim
// format the front-end needs: the host step refuses a start before it
// fences anything when it or its hook reads an older one. A host binary
// that does not know the flag is older than claim format 2, and it rejects
// the flag before it does anything (UnknownClaimFormatFlag).
const ClaimFormatFlag = "min-claim-format"

// UnknownClaimFormatFlag reports that r is the refusal of a host binary
// that does not know ClaimFormatFlag (Go's flag package: "flag provided but
// not defined: -min-claim-format").
func (r *Response) UnknownClaimFormatFlag() bool {
	return !r.OK && r.Kind == outcome.Usage && strings.Contains(r.Error, "-"+ClaimFormatFlag)
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}
