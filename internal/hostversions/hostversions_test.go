package hostversions

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// writeHook installs, under root, the qemu.d wrapper the installer writes
// and a hook binary stand-in that prints out for --version and counts its
// runs in root/runs.
func writeHook(t *testing.T, root, out string) string {
	t.Helper()
	bin := filepath.Join(root, "usr/lib/rbdfence/bin/rbdfence-hook")
	for p, body := range map[string]string{
		filepath.Join(root, Wrapper): "#!/bin/sh\nexec " + bin + " --config /etc/one/rbdfence.yaml -- \"$@\"\n",
		bin:                          "#!/bin/sh\necho x >> " + root + "/runs\necho '" + out + "' >&2\n",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

func runs(root string) int {
	b, _ := os.ReadFile(filepath.Join(root, "runs"))
	return strings.Count(string(b), "x")
}

func TestHook(t *testing.T) {
	if b := Hook(t.Context(), t.TempDir(), ""); b != nil {
		t.Fatalf("no hook installed: %+v", b)
	}
	root := t.TempDir()
	bin := writeHook(t, root, hoststep.HookVersionLine("1.0"))
	cache := filepath.Join(root, "state")
	for i := 1; i <= 2; i++ {
		b := Hook(t.Context(), root, cache)
		if b == nil || b.Path != bin || b.Version != "1.0" || b.ClaimFormat != engine.ClaimFormat || b.Error != "" {
			t.Fatalf("run %d: %+v", i, b)
		}
		if runs(root) != 1 {
			t.Fatalf("run %d: the hook ran %d times: the cache keeps its answer", i, runs(root))
		}
	}
	// An upgrade replaces the file: it is asked again.
	writeHook(t, root, "rbdfence-hook 0300e58")
	if err := os.Rename(bin, bin+".new"); err != nil { // a new inode, as dpkg unpacks
		t.Fatal(err)
	}
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	b := Hook(t.Context(), root, cache)
	if b == nil || b.Version != "0300e58" || b.ClaimFormat != 0 || runs(root) != 2 {
		t.Fatalf("after the upgrade: %+v, %d runs", b, runs(root))
	}
	// A hook that cannot say: the error, never a guessed format.
	writeHook(t, root, "usage: nonsense")
	b = Hook(t.Context(), root, "")
	if b == nil || b.Error == "" || b.ClaimFormat != 0 {
		t.Fatalf("unreadable answer: %+v", b)
	}
	// A wrapper whose binary is gone.
	os.Remove(bin)
	if b = Hook(t.Context(), root, cache); b == nil || !strings.Contains(b.Error, "missing") {
		t.Fatalf("missing binary: %+v", b)
	}
}

func TestFindHookLegacy(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "usr/local/libexec/rbdfence/rbdfence-hook")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.WriteFile(bin, []byte("x"), 0o755)
	os.MkdirAll(filepath.Join(root, "etc/libvirt/hooks"), 0o755)
	os.WriteFile(filepath.Join(root, Legacy), []byte("#!/bin/sh\n/usr/local/libexec/rbdfence/rbdfence-hook \"$@\" || exit\n"), 0o755)
	entry, got, installed, err := FindHook(root)
	if err != nil || !installed || entry != filepath.Join(root, Legacy) || got != bin {
		t.Fatalf("%s %s %v %v", entry, got, installed, err)
	}
	// Someone else's legacy hook is not ours.
	os.WriteFile(filepath.Join(root, Legacy), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	if _, _, installed, _ := FindHook(root); installed {
		t.Fatal("a foreign hook taken for ours")
	}
}

// TestPlatform reads this machine: its glibc and OS are always there.
func TestPlatform(t *testing.T) {
	p := Platform(t.Context(), "/")
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+`).MatchString(p.Glibc) || p.OS == "" || p.Arch == "" {
		t.Fatalf("%+v", p)
	}
}
