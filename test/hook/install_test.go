package hook_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// snapshot describes every file under root: mode, and content hash or
// symlink target.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustInstall(t *testing.T, args ...string) string {
	t.Helper()
	bin := testenv.Bin(t, "rbdfence-hook")
	out, err := installSh(filepath.Dir(bin), append([]string{"host"}, args...)...)
	if err != nil {
		t.Fatalf("install.sh host %v: %v\n%s", args, err, out)
	}
	return out
}

// runScript runs an installed hook script as libvirtd does.
func runScript(t *testing.T, path, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, o.String(), e.String()
}

const rbdDomain = `<domain type='kvm'><name>one-7</name><memory>65536</memory><devices>
<disk type='network' device='disk'><source protocol='rbd' name='one/one-3-7-0'><host name='127.0.0.1' port='6789'/></source>
<target dev='vda' bus='virtio'/></disk></devices></domain>
`

// TestInstallHostLegacyChain installs the chain for libvirt < 6.5 over an
// existing /etc/libvirt/hooks/qemu: the original keeps working (same argv,
// same stdin, its stdout and its exit code), ours runs first and can stop
// a start, a second install changes nothing, and --uninstall restores the
// tree exactly.
func TestInstallHostLegacyChain(t *testing.T) {
	prefix := t.TempDir()
	hooks := filepath.Join(prefix, "etc/libvirt/hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	seen := filepath.Join(t.TempDir(), "seen")
	orig := "#!/bin/sh\n# the site's own hook\n{ echo \"argv: $*\"; cat; } >>'" + seen + "'\necho ORIGINAL-OUTPUT\nexit 3\n"
	if err := os.WriteFile(filepath.Join(hooks, "qemu"), []byte(orig), 0o750); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, prefix)

	missingCfg := filepath.Join(t.TempDir(), "absent.yaml")
	mustInstall(t, "--prefix", prefix, "--legacy", "--config", missingCfg)
	first := snapshot(t, prefix)
	mustInstall(t, "--prefix", prefix, "--legacy", "--config", missingCfg)
	if again := snapshot(t, prefix); !reflect.DeepEqual(first, again) {
		t.Fatalf("a second install changed the tree:\n%v\n%v", first, again)
	}
	chain := filepath.Join(hooks, "qemu")
	if _, err := os.Stat(filepath.Join(hooks, "qemu.d", "10-rbdfence")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("--legacy must not install a qemu.d entry")
	}

	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantCode int
		wantOurs string // substring of stderr from our hook
	}{
		// Ours has nothing to do: the original's exit code and stdout go through.
		{name: "restore passes through", args: []string{"one-7", "restore", "begin", "-"}, stdin: "<domain><name>one-7</name></domain>\n\n", wantCode: 3},
		// Ours fails (its config is missing): its code wins, the original still runs.
		{name: "our failure stops a start", args: []string{"one-7", "prepare", "begin", "-"}, stdin: rbdDomain, wantCode: 2, wantOurs: "rbdfence: not starting one-7: config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_ = os.Remove(seen)
			code, stdout, stderr := runScript(t, chain, tt.stdin, tt.args...)
			if code != tt.wantCode || stdout != "ORIGINAL-OUTPUT\n" {
				t.Fatalf("exit %d stdout %q stderr %q; want exit %d and the original's stdout", code, stdout, stderr, tt.wantCode)
			}
			if tt.wantOurs != "" && (!strings.Contains(stderr, tt.wantOurs) || ourLines(stderr) != 1) {
				t.Fatalf("stderr %q, want our one line %q", stderr, tt.wantOurs)
			}
			got, err := os.ReadFile(seen)
			want := "argv: " + strings.Join(tt.args, " ") + "\n" + tt.stdin
			if err != nil || string(got) != want {
				t.Fatalf("the original hook got %q (%v), want %q", got, err, want)
			}
		})
	}

	mustInstall(t, "--prefix", prefix, "--uninstall")
	if after := snapshot(t, prefix); !reflect.DeepEqual(before, after) {
		t.Fatalf("--uninstall did not restore the tree:\nbefore %v\nafter  %v", before, after)
	}
	// Uninstalling twice is harmless.
	mustInstall(t, "--prefix", prefix, "--uninstall")
}

// TestInstallHostQemuD installs the qemu.d wrapper next to other hooks and
// over a file of the same name, switches to --legacy and back, and
// uninstalls: every step is idempotent and the end state is the start
// state, byte for byte.
func TestInstallHostQemuD(t *testing.T) {
	prefix := t.TempDir()
	qemuD := filepath.Join(prefix, "etc/libvirt/hooks/qemu.d")
	if err := os.MkdirAll(qemuD, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"05-other": "#!/bin/sh\nexit 0\n", "10-rbdfence": "#!/bin/sh\n# someone else's\nexit 0\n"} {
		if err := os.WriteFile(filepath.Join(qemuD, name), []byte(body), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, prefix)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "rbdfence.yaml")
	cfgText := "host_name: node1\nceph:\n  keyring: " + filepath.Join(dir, "absent.keyring") + "\n" +
		"audit_log: " + filepath.Join(dir, "audit.log") + "\nstate_dir: " + filepath.Join(dir, "state") + "\n"
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, "--prefix", prefix, "--config", cfg)
	first := snapshot(t, prefix)
	mustInstall(t, "--prefix", prefix, "--config", cfg)
	if again := snapshot(t, prefix); !reflect.DeepEqual(first, again) {
		t.Fatalf("a second install changed the tree:\n%v\n%v", first, again)
	}
	entry := filepath.Join(qemuD, "10-rbdfence")
	body, _ := os.ReadFile(entry)
	if !strings.Contains(string(body), "--config '"+cfg+"'") {
		t.Fatalf("the wrapper must carry the config path:\n%s", body)
	}
	if first["etc/libvirt/hooks/qemu.d/05-other"] != before["etc/libvirt/hooks/qemu.d/05-other"] {
		t.Fatal("another qemu.d hook was touched")
	}
	// The wrapper runs the hook with that config: a domain without RBD disks
	// passes at once; one with RBD disks reaches for Ceph with the config's
	// keyring, which does not exist: refused (fail closed), one line.
	if code, _, stderr := runScript(t, entry, "<domain><name>web</name></domain>", "web", "prepare", "begin", "-"); code != 0 {
		t.Fatalf("no-RBD domain: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runScript(t, entry, rbdDomain, "one-7", "prepare", "begin", "-"); code != 3 || ourLines(stderr) != 1 ||
		!strings.Contains(stderr, "absent.keyring") {
		t.Fatalf("RBD domain without Ceph access: exit %d, stderr %q; want a refusal", code, stderr)
	}

	// Switch to the legacy chain and back.
	mustInstall(t, "--prefix", prefix, "--legacy", "--config", cfg)
	if _, err := os.Stat(filepath.Join(prefix, "etc/libvirt/hooks/qemu")); err != nil {
		t.Fatal("--legacy did not install the chain")
	}
	if s := snapshot(t, prefix); s["etc/libvirt/hooks/qemu.d/10-rbdfence"] != before["etc/libvirt/hooks/qemu.d/10-rbdfence"] {
		t.Fatal("switching to --legacy must restore the qemu.d file that was there")
	}
	mustInstall(t, "--prefix", prefix, "--config", cfg)
	if s := snapshot(t, prefix); !reflect.DeepEqual(s, first) {
		t.Fatalf("back to qemu.d: tree differs from the first install:\n%v\n%v", first, s)
	}

	mustInstall(t, "--prefix", prefix, "--uninstall")
	if after := snapshot(t, prefix); !reflect.DeepEqual(before, after) {
		t.Fatalf("--uninstall did not restore the tree:\nbefore %v\nafter  %v", before, after)
	}
}
