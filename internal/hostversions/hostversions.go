// Package hostversions finds out which rbdfence runs on this host: the
// host step (the running binary), the libvirt hook libvirtd runs (asked
// with its --version), the rbdfence packages and the platform they need
// (glibc, librados). The host step reports it in every response
// (hoststep.Versions), doctor prints it. Pure Go: it reads files and runs
// the hook, dpkg-query or rpm and getconf, nothing else.
package hostversions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// Wrapper is the hook's entry that the installer writes (libvirt >= 6.5);
// Legacy the chained hook of older libvirt. Both relative to the root.
const (
	Wrapper = "etc/libvirt/hooks/qemu.d/10-rbdfence"
	Legacy  = "etc/libvirt/hooks/qemu"
)

// askTimeout bounds the hook's --version.
const askTimeout = 5 * time.Second

// Self describes the running host step.
func Self(version string) hoststep.Binary {
	p, err := os.Executable()
	if err != nil {
		p = os.Args[0]
	}
	return hoststep.Binary{Path: p, Version: version, Protocol: hoststep.Version, ClaimFormat: engine.ClaimFormat}
}

var hookBinRe = regexp.MustCompile(`(/[^\s'"]*rbdfence-hook)`)

// FindHook returns the entry libvirtd runs for rbdfence under root (the
// qemu.d wrapper, else a legacy hook that runs rbdfence-hook) and the hook
// binary it runs (below root). installed is false when neither entry is
// there; err says what is wrong with an entry that is.
func FindHook(root string) (entry, bin string, installed bool, err error) {
	wrapper := filepath.Join(root, Wrapper)
	legacy := filepath.Join(root, Legacy)
	entry = wrapper
	if _, serr := os.Stat(wrapper); serr != nil {
		b, lerr := os.ReadFile(legacy)
		if lerr != nil || !bytes.Contains(b, []byte("rbdfence")) {
			return wrapper, "", false, fmt.Errorf("%s is missing", wrapper)
		}
		entry = legacy
	}
	if err := Executable(entry); err != nil {
		return entry, "", true, err
	}
	b, _ := os.ReadFile(entry)
	bin = hookBinRe.FindString(string(b))
	if bin == "" {
		return entry, "", true, fmt.Errorf("%s does not run rbdfence-hook", entry)
	}
	if clean := filepath.Clean(root); clean != "/" && !strings.HasPrefix(bin, clean+"/") {
		bin = filepath.Join(root, bin) // installed with a --prefix: the path is already absolute
	}
	if err := Executable(bin); err != nil {
		return entry, bin, true, err
	}
	return entry, bin, true, nil
}

// Executable fails unless path is an executable file.
func Executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s is missing", path)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}

// Hook finds the hook libvirtd runs under root and asks it its version
// and claim format; nil when no rbdfence hook is installed. cacheDir (""
// for none) keeps the answer per hook file (path, size, times, inode): a
// hook starts librados to say its version (~50 ms), an upgrade replaces
// the file and so the entry.
func Hook(ctx context.Context, root, cacheDir string) *hoststep.Binary {
	entry, bin, installed, err := FindHook(root)
	if !installed {
		return nil
	}
	if err != nil {
		p := bin
		if p == "" {
			p = entry
		}
		return &hoststep.Binary{Path: p, Error: err.Error()}
	}
	id := fileID(bin)
	if c := readCache(cacheDir); c != nil && id != "" && c.ID == id {
		b := c.Binary
		return &b
	}
	b := ask(ctx, bin)
	if b.Error != "" {
		// Uninstalled while we asked (the installer removes the entry
		// before the binary): no hook, not a broken one.
		if _, _, still, _ := FindHook(root); !still {
			return nil
		}
	}
	if b.Error == "" && id != "" {
		writeCache(cacheDir, cacheEntry{ID: id, Binary: *b})
	}
	return b
}

// ask runs `bin --version` (stdin empty, bounded) and parses its line.
func ask(ctx context.Context, bin string) *hoststep.Binary {
	b := &hoststep.Binary{Path: bin}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		b.Error = fmt.Sprintf("%s --version: %v: %s", bin, err, lastLine(out))
		return b
	}
	v, f, perr := hoststep.ParseHookVersion(string(out))
	if perr != nil {
		b.Error = fmt.Sprintf("%s %v", bin, perr)
		return b
	}
	b.Version, b.ClaimFormat = v, f
	return b
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// fileID identifies a file's content as the file system sees it.
func fileID(p string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d:%d:%d:%d", p, st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
}

type cacheEntry struct {
	ID     string          `json:"id"`
	Binary hoststep.Binary `json:"binary"`
}

const cacheFile = "hook-version.json"

func readCache(dir string) *cacheEntry {
	if dir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, cacheFile))
	if err != nil {
		return nil
	}
	var c cacheEntry
	if json.Unmarshal(b, &c) != nil {
		return nil
	}
	return &c
}

// writeCache is best effort: without it the hook is asked each time.
func writeCache(dir string, c cacheEntry) {
	if dir == "" {
		return
	}
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, ".hook-version-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), filepath.Join(dir, cacheFile)) != nil {
		_ = os.Remove(tmp.Name())
	}
}

// Names are rbdfence's packages, as Packages looks them up.
var Names = []string{"rbdfence", "rbdfence-host", "rbdfence-frontend"}

// Packages returns the installed rbdfence packages (dpkg, else rpm).
func Packages(ctx context.Context) []hoststep.Package {
	return installed(ctx, Names...)
}

// installed returns those of names that dpkg (else rpm) has installed.
func installed(ctx context.Context, names ...string) []hoststep.Package {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	var out []hoststep.Package
	if _, err := exec.LookPath("dpkg-query"); err == nil {
		b, _ := exec.CommandContext(ctx, "dpkg-query", append([]string{"-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n"}, names...)...).Output()
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) == 3 && strings.HasPrefix(f[0], "ii") {
				out = append(out, hoststep.Package{Name: f[1], Version: f[2]})
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	if _, err := exec.LookPath("rpm"); err == nil {
		b, _ := exec.CommandContext(ctx, "rpm", append([]string{"-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\n"}, names...)...).Output()
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) == 2 {
				out = append(out, hoststep.Package{Name: f[0], Version: f[1]})
			}
		}
	}
	return out
}

// Platform reads the host's userland under root: its OS, architecture,
// glibc and librados.
func Platform(ctx context.Context, root string) *hoststep.Platform {
	p := &hoststep.Platform{OS: osName(root)}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	if b, err := exec.CommandContext(ctx, "uname", "-m").Output(); err == nil {
		p.Arch = strings.TrimSpace(string(b))
	}
	if b, err := exec.CommandContext(ctx, "getconf", "GNU_LIBC_VERSION").Output(); err == nil {
		p.Glibc = strings.TrimPrefix(strings.TrimSpace(string(b)), "glibc ")
	}
	p.Librados = library(ctx, "librados2", "librados.so.2")
	p.Librbd = library(ctx, "librbd1", "librbd.so.1")
	return p
}

// library is "PKG VERSION" when the package is installed, else soname
// when the loader's cache has it, else "".
func library(ctx context.Context, pkg, soname string) string {
	for _, p := range installed(ctx, pkg) {
		return p.Name + " " + p.Version
	}
	for _, ldconfig := range []string{"ldconfig", "/sbin/ldconfig"} {
		if b, err := exec.CommandContext(ctx, ldconfig, "-p").Output(); err == nil {
			if bytes.Contains(b, []byte("\t"+soname+" ")) {
				return soname
			}
			return ""
		}
	}
	return ""
}

// osName is PRETTY_NAME of root's os-release.
func osName(root string) string {
	for _, f := range []string{"etc/os-release", "usr/lib/os-release"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				return strings.Trim(v, `"'`)
			}
		}
	}
	return ""
}
