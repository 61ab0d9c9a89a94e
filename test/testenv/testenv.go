// Package testenv gives real-parts tests the real things: the one-node Ceph
// cluster (started through test/ceph/cluster.sh, idempotent), the project's
// binaries built once per test process, and zombie librbd clients run as
// separate processes. Nothing here fakes Ceph: when a part cannot be started,
// the test fails, it never skips.
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// T is the part of testing.TB the helpers use, so that benchmarks run as
// programs can use them too.
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Root returns the repository root.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// TestRoot is where a test run keeps every daemon's state and scratch file
// ($RBDFENCE_TEST_ROOT, default /tmp/rbdfence-test); test/run.sh stops and
// removes all of it when the run ends. Test ports are 16780-16799.
func TestRoot() string {
	if r := os.Getenv("RBDFENCE_TEST_ROOT"); r != "" {
		return r
	}
	return "/tmp/rbdfence-test"
}

// Dir is a directory of the test run: TestRoot()/name.
func Dir(name string) string { return filepath.Join(TestRoot(), name) }

// Ceph is a running test cluster as cluster.sh describes it.
type Ceph struct {
	Mon           string // IP:PORT
	MonHost       string // as written in ceph.conf
	Conf          string // client conf (no keyring)
	AdminConf     string
	Keyring       string // client.libvirt
	User          string // libvirt
	AdminKeyring  string
	RMUser        string
	RMUserKeyring string
	Pool          string
	Dir           string
}

var (
	cephOnce sync.Map // dir -> *cephResult
)

type cephResult struct {
	once sync.Once
	c    *Ceph
	err  error
}

// StartCeph starts (or reuses) the default test cluster and returns it.
func StartCeph(t T) *Ceph {
	t.Helper()
	return StartCephAt(t, "", "", "")
}

// StartCephAt starts (or reuses) a cluster with the given dir, address and
// port ("" for the script's defaults).
func StartCephAt(t T, dir, addr, port string) *Ceph {
	t.Helper()
	v, _ := cephOnce.LoadOrStore(dir+"|"+addr+"|"+port, &cephResult{})
	r := v.(*cephResult)
	r.once.Do(func() {
		args := []string{filepath.Join(Root(), "test/ceph/cluster.sh"), "start"}
		if dir != "" {
			args = append(args, "--dir", dir)
		}
		if addr != "" {
			args = append(args, "--addr", addr)
		}
		if port != "" {
			args = append(args, "--port", port)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			r.err = fmt.Errorf("test/ceph/cluster.sh start: %v\n%s", err, tail(errb.String(), 30))
			return
		}
		env := ParseExports(out.String())
		r.c = &Ceph{
			Mon: env["RBDFENCE_TEST_MON"], MonHost: env["RBDFENCE_TEST_MON_HOST"], Conf: env["RBDFENCE_TEST_CONF"],
			AdminConf: env["RBDFENCE_TEST_ADMIN_CONF"], Keyring: env["RBDFENCE_TEST_KEYRING"], User: env["RBDFENCE_TEST_USER"],
			AdminKeyring: env["RBDFENCE_TEST_ADMIN_KEYRING"], RMUser: env["RBDFENCE_TEST_RMUSER"],
			RMUserKeyring: env["RBDFENCE_TEST_RMUSER_KEYRING"], Pool: env["RBDFENCE_TEST_POOL"], Dir: env["RBDFENCE_TEST_CEPH_DIR"],
		}
		if r.c.Mon == "" || r.c.Keyring == "" || r.c.Pool == "" {
			r.err = fmt.Errorf("cluster.sh printed no usable env:\n%s", out.String())
		}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.c
}

// ParseExports reads `export K=V` lines (values optionally quoted).
func ParseExports(s string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "export "))
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		env[k] = strings.Trim(v, `'"`)
	}
	return env
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Admin runs a command (rbd, ceph, rados) as client.admin on the cluster.
func (c *Ceph) Admin(t T, prog string, args ...string) string {
	t.Helper()
	return c.run(t, prog, append([]string{"-c", c.AdminConf}, args...)...)
}

// AsLibvirt runs a command as client.libvirt with the documented caps.
func (c *Ceph) AsLibvirt(t T, prog string, args ...string) string {
	t.Helper()
	return c.run(t, prog, append([]string{"-c", c.Conf, "--id", c.User, "--keyring", c.Keyring}, args...)...)
}

func (c *Ceph) run(t T, prog string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Only stdout is the answer: librados writes transient notices
	// ("monclient: handle_auth_reply_more no authorizer?") to stderr, which
	// a caller parsing JSON must not see.
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", prog, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

var imageSeq struct {
	sync.Mutex
	n int
}

// NewImage creates a fresh 64 MiB image in the test pool, removed at cleanup.
func (c *Ceph) NewImage(t T, prefix string) string {
	t.Helper()
	imageSeq.Lock()
	imageSeq.n++
	name := fmt.Sprintf("%s-%d-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9, imageSeq.n)
	imageSeq.Unlock()
	spec := c.Pool + "/" + name
	c.Admin(t, "rbd", "create", spec, "--size", "64M")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "rbd", "-c", c.AdminConf, "rm", "--no-progress", spec).Run()
	})
	return spec
}

// BlocklistEntries returns "addr" -> "expiry time" from `ceph osd blocklist ls`.
func (c *Ceph) BlocklistEntries(t T) map[string]string {
	t.Helper()
	// stdout only: with a long list, "listed N entries" and librados'
	// warnings on stderr would land inside lines of a combined output.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, "ceph", "-c", c.AdminConf, "osd", "blocklist", "ls").Output()
	if err != nil {
		t.Fatalf("ceph osd blocklist ls: %v", err)
	}
	out := string(b)
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.Contains(f[0], "/") {
			m[f[0]] = strings.Join(f[1:], " ")
		}
	}
	return m
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Bin returns the path of one of the project's binaries, building all of them
// once per test process ("rbdfence", "zombie", ...).
func Bin(t T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		// Under the test root: test/run.sh removes it with the rest.
		if buildErr = os.MkdirAll(TestRoot(), 0o755); buildErr != nil {
			return
		}
		binDir, buildErr = os.MkdirTemp(TestRoot(), "bin-")
		if buildErr != nil {
			return
		}
		pkgs := map[string]string{}
		for _, dir := range []string{"cmd/*", "drivers/*", "hooks/*", "test/zombie"} {
			matches, _ := filepath.Glob(filepath.Join(Root(), dir))
			for _, m := range matches {
				if st, err := os.Stat(filepath.Join(m, "main.go")); err == nil && !st.IsDir() {
					pkgs[filepath.Base(m)] = "./" + strings.TrimPrefix(m, Root()+"/")
				}
			}
		}
		for n, p := range pkgs {
			cmd := exec.Command("go", "build", "-tags", "pacific", "-o", filepath.Join(binDir, n), p)
			cmd.Dir = Root()
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", p, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	p := filepath.Join(binDir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("binary %s was not built: %v", name, err)
	}
	return p
}

// ZombieEvent is one line of the zombie's output.
type ZombieEvent struct {
	Event string `json:"event"`
	Addr  string `json:"addr"`
	GID   uint64 `json:"gid"`
	N     int    `json:"n"`
	OK    bool   `json:"ok"`
	Errno int    `json:"errno"`
	Error string `json:"error"`
}

// Zombie is a running librbd client in its own process.
type Zombie struct {
	Addr   string
	GID    uint64
	cmd    *exec.Cmd
	events chan ZombieEvent
	stderr *syncBuffer
}

// syncBuffer is a bytes.Buffer that a process writes while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartZombie runs test/zombie on image in mode "write" or "idle" (extra
// flags, e.g. "--bind", "10.0.0.2", are appended) and waits until it is ready.
func StartZombie(t T, c *Ceph, image, mode string, extra ...string) *Zombie {
	t.Helper()
	args := append([]string{"--mon", c.Mon, "--id", c.User, "--keyring", c.Keyring, "--image", image, "--mode", mode}, extra...)
	return startZombie(t, exec.Command(Bin(t, "zombie"), args...))
}

// StartZombieCmd runs a prepared zombie command (e.g. inside a netns).
func StartZombieCmd(t T, cmd *exec.Cmd) *Zombie { t.Helper(); return startZombie(t, cmd) }

func startZombie(t T, cmd *exec.Cmd) *Zombie {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	z := &Zombie{cmd: cmd, events: make(chan ZombieEvent, 1024), stderr: stderr}
	ready := make(chan ZombieEvent, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev ZombieEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			if ev.Event == "ready" {
				ready <- ev
				continue
			}
			// A full buffer (nobody read for 100 s of writes) loses its
			// oldest result, never the newest: the write after a fence
			// is what tests wait for.
			select {
			case z.events <- ev:
			default:
				select {
				case <-z.events:
				default:
				}
				z.events <- ev
			}
		}
		close(z.events)
	}()
	t.Cleanup(z.Stop)
	select {
	case ev := <-ready:
		z.Addr, z.GID = ev.Addr, ev.GID
	case <-time.After(30 * time.Second):
		z.Stop()
		t.Fatalf("zombie not ready after 30s: %s", stderr.String())
	}
	return z
}

// WaitWrite waits for the next write result matching ok.
func (z *Zombie) WaitWrite(t T, ok bool, within time.Duration) ZombieEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, open := <-z.events:
			if !open {
				state := "still running"
				if z.cmd.ProcessState != nil {
					state = z.cmd.ProcessState.String()
				} else if err := z.cmd.Wait(); err != nil {
					state = err.Error()
				} else {
					state = "exit 0"
				}
				t.Fatalf("zombie %s ended its output (%s) before a write with ok=%v; its stderr:\n%s", z.Addr, state, ok, z.stderr.String())
			}
			if ev.Event == "write" && ev.OK == ok {
				return ev
			}
		case <-deadline:
			t.Fatalf("no write with ok=%v within %s", ok, within)
		}
	}
}

// Stop ends the zombie (idempotent).
func (z *Zombie) Stop() {
	if z.cmd.Process == nil || z.cmd.ProcessState != nil {
		return
	}
	_ = z.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = z.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = z.cmd.Process.Kill()
		<-done
	}
}

// EnsureImages makes sure the named images exist in the test pool (creating
// the missing ones, 8 at a time) and returns their "pool/name" specs. They are
// kept between runs: benchmarks use them, and creating hundreds is slow.
func (c *Ceph) EnsureImages(t T, names []string, size string) []string {
	t.Helper()
	existing := map[string]bool{}
	out, _ := exec.Command("rbd", "-c", c.AdminConf, "ls", c.Pool).Output()
	for _, l := range strings.Fields(string(out)) {
		existing[l] = true
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []string
		sem  = make(chan struct{}, 8)
	)
	specs := make([]string, len(names))
	for i, n := range names {
		specs[i] = c.Pool + "/" + n
		if existing[n] {
			continue
		}
		wg.Add(1)
		go func(spec string) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if out, err := exec.Command("rbd", "-c", c.AdminConf, "create", spec, "--size", size).CombinedOutput(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("rbd create %s: %v %s", spec, err, out))
				mu.Unlock()
			}
		}(specs[i])
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%s", strings.Join(errs, "\n"))
	}
	return specs
}

// HostConfig is the config of a host step on this cluster as the tests
// write it: short timeouts, a two-hour blocklist expiry, and its audit log
// (host-audit.log), spool (host-spool) and state (host-state) in dir.
func (c *Ceph) HostConfig(dir string) string {
	return fmt.Sprintf(`ceph:
  mon_host: %s
  user: %s
  keyring: %s
timeouts:
  connect: 5s
  ceph_op: 10s
  total: 60s
fence:
  expire: 2h
audit_log: %s
spool_dir: %s
state_dir: %s
`, c.Mon, c.User, c.Keyring, filepath.Join(dir, "host-audit.log"), filepath.Join(dir, "host-spool"), filepath.Join(dir, "host-state"))
}
