//go:build pacific

// Package disks tests that every host step handles every disk of a VM: disks
// in two real Ceph clusters, IPv6 clients, shared and read-only images,
// the claim's location and hot-attached disks. Every test runs the real
// host step (fencer.Do) against real clusters and real librbd clients.
package disks

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// The host steps here run in this process (fencer.Do) on hosts without a
// libvirtd of their own: libvirt's test driver answers for them, without a
// daemon ("no such domain"), so that a start on the claim's own host gets
// the answer it needs (issue 18 item 1) whether or not the machine's
// libvirtd happens to run.
func init() { os.Setenv("LIBVIRT_DEFAULT_URI", "test:///default") }

// envOr returns the environment variable k, or def when it is unset.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// secondCeph is a second, independent real cluster: RBDFENCE_CEPH2_DIR
// (default: ceph-2 under the test root) and RBDFENCE_CEPH2_PORT (default
// 16792, in the test port range).
func secondCeph(t *testing.T) *testenv.Ceph {
	t.Helper()
	return testenv.StartCephAt(t, envOr("RBDFENCE_CEPH2_DIR", testenv.Dir("ceph-2")), "", envOr("RBDFENCE_CEPH2_PORT", "16792"))
}

// ipv6Ceph is a real cluster on the IPv6 loopback [::1]: RBDFENCE_CEPH6_DIR
// (default: ceph-v6 under the test root) and RBDFENCE_CEPH6_PORT (default
// 16793).
func ipv6Ceph(t *testing.T) *testenv.Ceph {
	t.Helper()
	return testenv.StartCephAt(t, envOr("RBDFENCE_CEPH6_DIR", testenv.Dir("ceph-v6")), "::1", envOr("RBDFENCE_CEPH6_PORT", "16793"))
}

var vmSeq atomic.Int64

// newVM returns a VM id no other test run uses.
func newVM() int {
	return int(time.Now().UnixNano()/1000%1_000_000_000) + int(vmSeq.Add(1))
}

// disk describes image spec ("pool/name") of cluster c as OpenNebula gives
// it: the cluster's monitors, user, keyring and conf on the disk itself.
func disk(t *testing.T, c *testenv.Ceph, id, spec string) vmdisk.Disk {
	t.Helper()
	pool, ns, name, err := vmdisk.ParseImage(spec)
	if err != nil {
		t.Fatal(err)
	}
	return vmdisk.Disk{ID: id, Pool: pool, Namespace: ns, Name: name, Monitors: []string{c.Mon}, User: c.User, Keyring: c.Keyring, Conf: c.Conf}
}

// hostConfig is a host's configuration with the given own addresses (the
// clients on them are "on this host") and its logs in a temporary dir.
func hostConfig(t *testing.T, c *testenv.Ceph, hostAddrs ...string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Ceph = config.Ceph{Conf: c.Conf, MonHost: c.Mon, User: c.User, Keyring: c.Keyring}
	cfg.AuditLog = filepath.Join(dir, "audit.log")
	cfg.SpoolDir = filepath.Join(dir, "spool")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.HostAddresses = hostAddrs
	cfg.Fence.Expire = config.Duration(time.Hour)
	return cfg
}

// addr is the zombie's address as Ceph blocklists it.
func addr(t *testing.T, z *testenv.Zombie) string {
	t.Helper()
	a, err := engine.ParseAddr(z.Addr)
	if err != nil {
		t.Fatalf("zombie address %q: %v", z.Addr, err)
	}
	return a.String()
}

// blocklisted fails the test unless a is in c's OSD blocklist.
func blocklisted(t *testing.T, c *testenv.Ceph, a string) {
	t.Helper()
	if _, ok := c.BlocklistEntries(t)[a]; !ok {
		t.Fatalf("%s is not in the blocklist of the cluster at %s", a, c.Mon)
	}
}

// notBlocklisted fails the test if a is in c's OSD blocklist.
func notBlocklisted(t *testing.T, c *testenv.Ceph, a string) {
	t.Helper()
	if _, ok := c.BlocklistEntries(t)[a]; ok {
		t.Fatalf("%s was blocklisted in the cluster at %s", a, c.Mon)
	}
}

// readClaim reads VM vm's claim object from pool of cluster c ("" if none).
func readClaim(t *testing.T, c *testenv.Ceph, pool string, vm int) *engine.Claim {
	t.Helper()
	out, err := exec.Command("rados", "-c", c.AdminConf, "-p", pool, "get", engine.ClaimObject(vm), "-").Output()
	if err != nil || len(out) == 0 {
		return nil
	}
	var cl engine.Claim
	if err := json.Unmarshal(out, &cl); err != nil {
		t.Fatalf("claim of VM %d in %s: %v: %s", vm, pool, err, out)
	}
	return &cl
}

func hasAddr(as []engine.Addr, s string) bool {
	for _, a := range as {
		if a.String() == s {
			return true
		}
	}
	return false
}

func run() string { return fmt.Sprintf("test%d", time.Now().UnixNano()%1e9) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// putObject writes v as JSON into pool/oid of cluster c (as client.admin).
func putObject(t *testing.T, c *testenv.Ceph, pool, oid string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "obj")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Admin(t, "rados", "-p", pool, "put", oid, f)
	t.Cleanup(func() { _ = exec.Command("rados", "-c", c.AdminConf, "-p", pool, "rm", oid).Run() })
}
