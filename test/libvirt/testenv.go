package libvirttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// ScriptTimeout bounds one run of test/ceph/cluster.sh or
// test/libvirt/env.sh.
const ScriptTimeout = 4 * time.Minute

// Ceph is the test cluster as test/ceph/cluster.sh start reports it (through
// testenv.StartCeph).
type Ceph struct {
	// Mon is the monitor "IP:PORT" (RBDFENCE_TEST_MON).
	Mon string
	// Conf and Keyring give User's access (RBDFENCE_TEST_CONF,
	// RBDFENCE_TEST_KEYRING); User is "libvirt" (RBDFENCE_TEST_USER).
	Conf, Keyring, User string
	// AdminConf is a ceph.conf for client.admin (RBDFENCE_TEST_ADMIN_CONF).
	AdminConf string
	// Pool is the RBD pool, "one" (RBDFENCE_TEST_POOL).
	Pool string
	// Env is every variable the script exported.
	Env map[string]string
}

// Libvirt is the daemon pair as test/libvirt/env.sh start reports it.
type Libvirt struct {
	// URI is the connection URI (RBDFENCE_TEST_LIBVIRT_URI).
	URI string
	// DomType is "kvm" or "qemu" (TCG) (RBDFENCE_TEST_DOMTYPE).
	DomType string
	// HookDir is /etc/libvirt/hooks/qemu.d (RBDFENCE_TEST_HOOK_DIR).
	HookDir string
	// Env is every variable the script exported.
	Env map[string]string
}

var (
	startMu   sync.Mutex
	cephCache *Ceph
	virtCache *Libvirt
)

// RepoRoot returns the directory holding go.mod, searched upwards from the
// working directory (a package directory under go test).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// RunScript runs a repository script (path relative to the repository
// root) with ScriptTimeout and returns its stdout. The error carries the
// exit status and the tail of stderr.
func RunScript(path string, args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, path)}, args...)...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s", ScriptTimeout)
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\n%s", path, strings.Join(args, " "), err, tail(stderr.String(), 30))
	}
	return stdout.String(), nil
}

// ParseExports reads `export NAME=VALUE [NAME=VALUE...]` lines as a shell
// would for simple values: single or double quotes, and a backslash outside
// quotes escaping the next character (so 'it'\”s' is it's). Other lines
// are ignored.
func ParseExports(s string) (map[string]string, error) {
	env := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "export ")
		if !ok {
			continue
		}
		words, err := splitWords(rest)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		for _, w := range words {
			name, value, ok := strings.Cut(w, "=")
			if !ok || name == "" {
				return nil, fmt.Errorf("line %q: %q is not NAME=VALUE", line, w)
			}
			env[name] = value
		}
	}
	return env, nil
}

// splitWords splits on blanks outside quotes and removes the quotes and
// escaping backslashes.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, escaped := false, false
	var quote rune
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\\':
			escaped, inWord = true, true
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if escaped {
		return nil, fmt.Errorf("trailing backslash")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func need(env map[string]string, script string, names ...string) error {
	for _, n := range names {
		if env[n] == "" {
			return fmt.Errorf("%s did not export %s", script, n)
		}
	}
	return nil
}

// StartCeph starts (or reuses) the Ceph test cluster through
// testenv.StartCeph, the one way the tests start it (test/ceph/cluster.sh
// start, once per test process). Failure fails the test: it never skips.
func StartCeph(t testing.TB) Ceph {
	t.Helper()
	startMu.Lock()
	defer startMu.Unlock()
	if cephCache != nil {
		return *cephCache
	}
	c := testenv.StartCeph(t)
	cephCache = &Ceph{
		Mon:       c.Mon,
		Conf:      c.Conf,
		Keyring:   c.Keyring,
		User:      c.User,
		AdminConf: c.AdminConf,
		Pool:      c.Pool,
		Env: map[string]string{
			"RBDFENCE_TEST_MON":        c.Mon,
			"RBDFENCE_TEST_MON_HOST":   c.MonHost,
			"RBDFENCE_TEST_CONF":       c.Conf,
			"RBDFENCE_TEST_KEYRING":    c.Keyring,
			"RBDFENCE_TEST_USER":       c.User,
			"RBDFENCE_TEST_ADMIN_CONF": c.AdminConf,
			"RBDFENCE_TEST_POOL":       c.Pool,
			"RBDFENCE_TEST_CEPH_DIR":   c.Dir,
		},
	}
	if err := need(cephCache.Env, "test/ceph/cluster.sh", "RBDFENCE_TEST_MON", "RBDFENCE_TEST_CONF",
		"RBDFENCE_TEST_KEYRING", "RBDFENCE_TEST_USER", "RBDFENCE_TEST_ADMIN_CONF", "RBDFENCE_TEST_POOL"); err != nil {
		cephCache = nil
		t.Fatalf("Ceph test cluster: %v", err)
	}
	return *cephCache
}

// StartLibvirt starts (or reuses) virtlogd + libvirtd with
// `test/libvirt/env.sh start`. Failure fails the test: it never skips.
func StartLibvirt(t testing.TB) Libvirt {
	t.Helper()
	startMu.Lock()
	defer startMu.Unlock()
	if virtCache != nil {
		return *virtCache
	}
	// No package test installs a hook into the machine while this process
	// starts domains (test/packaging).
	testenv.ShareSystem(t)
	const script = "test/libvirt/env.sh"
	out, err := RunScript(script, "start")
	if err != nil {
		t.Fatalf("libvirt: %v", err)
	}
	env, err := ParseExports(out)
	if err == nil {
		err = need(env, script, "RBDFENCE_TEST_LIBVIRT_URI", "RBDFENCE_TEST_DOMTYPE", "RBDFENCE_TEST_HOOK_DIR")
	}
	if err != nil {
		t.Fatalf("libvirt: %v\nstdout:\n%s", err, out)
	}
	if env["RBDFENCE_TEST_LIBVIRT_URI"] != URI() {
		t.Fatalf("libvirt: env.sh serves %s but the tests use %s (RBDFENCE_TEST_LIBVIRT_URI)",
			env["RBDFENCE_TEST_LIBVIRT_URI"], URI())
	}
	virtCache = &Libvirt{
		URI:     env["RBDFENCE_TEST_LIBVIRT_URI"],
		DomType: env["RBDFENCE_TEST_DOMTYPE"],
		HookDir: env["RBDFENCE_TEST_HOOK_DIR"],
		Env:     env,
	}
	return *virtCache
}

// Secret returns the UUID of the libvirt ceph secret that holds user's key
// from keyring (`test/libvirt/env.sh secret USER KEYRING`), defining or
// updating it (its value is set on every call: a recreated cluster has new
// keys). Failure fails the test.
func Secret(t testing.TB, user, keyring string) string {
	t.Helper()
	out, err := RunScript("test/libvirt/env.sh", "secret", user, keyring)
	if err != nil {
		t.Fatalf("libvirt secret: %v", err)
	}
	uuid := strings.TrimSpace(out)
	if len(uuid) != 36 || strings.Count(uuid, "-") != 4 {
		t.Fatalf("libvirt secret: env.sh printed %q, want a UUID", out)
	}
	return uuid
}
