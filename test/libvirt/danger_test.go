package libvirttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDangerTwoQemusOneImage is the control experiment behind rbdfence:
// without any fencing, two QEMU processes (libvirt domains) that open the
// same non-shareable RBD image both write to it. Ceph's exclusive-lock
// feature hands the lock back and forth on request, so the "zombie" A
// overwrites what the legitimate instance B wrote, and B reads back data it
// did not write ("Pattern verification failed"). No rbdfence hook is
// involved: if this test ever fails because B's data survived, Ceph itself
// started protecting the image and the premise of rbdfence must be
// rechecked.
func TestDangerTwoQemusOneImage(t *testing.T) {
	ceph := StartCeph(t)
	lv := StartLibvirt(t)
	secret := Secret(t, ceph.User, ceph.Keyring)

	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	image := ceph.Pool + "/rbdfence-danger-" + suffix
	createImage(t, ceph.AdminConf, image)

	disk := []RBDDisk{{Image: image, Mon: ceph.Mon, User: ceph.User, SecretUUID: secret}}
	zombie, took := Create(t, DomainXML("rbdfence-danger-a-"+suffix, lv.DomType, disk))
	t.Logf("domain A (zombie) %s started in %s (type %s)", zombie, took.Round(time.Millisecond), lv.DomType)
	live, took := Create(t, DomainXML("rbdfence-danger-b-"+suffix, lv.DomType, disk))
	t.Logf("domain B (legitimate) %s started in %s", live, took.Round(time.Millisecond))

	// write writes p from dom and returns who holds the exclusive lock
	// afterwards: the writer, so the lock really moves between the QEMUs.
	write := func(dom string, p byte) string {
		t.Helper()
		out, err := WritePattern(t, dom, 0, p)
		if err != nil {
			t.Fatalf("%v\n%s log tail:\n%s", err, dom, logTail(dom))
		}
		owner := lockOwner(t, ceph.AdminConf, image)
		t.Logf("%s: write 0x%02x: %s; lock owner now %s", dom, p, lastLines(out, 2), owner)
		return owner
	}
	ownerA := write(zombie, 0xaa)
	ownerB := write(live, 0xbb)
	if ownerA == ownerB {
		t.Fatalf("the exclusive lock did not move from A to B (%s): is exclusive-lock on?", ownerA)
	}
	if out, err := ReadPattern(t, live, 0, 0xbb); err != nil {
		t.Fatalf("B cannot read back its own write before the zombie writes again: %v\n%s", err, out)
	}
	if again := write(zombie, 0xaa); again != ownerA {
		t.Fatalf("after the zombie's second write the lock is held by %s, want A's %s", again, ownerA)
	}

	out, err := ReadPattern(t, live, 0, 0xbb)
	switch {
	case errors.Is(err, ErrPatternMismatch):
		t.Logf("B's read-back 0xbb failed as expected: %s", oneLine(out))
	case err != nil:
		t.Fatalf("B's read-back failed for another reason: %v\n%s", err, out)
	default:
		t.Fatalf("B still reads 0xbb after the zombie wrote 0xaa: Ceph protected the image on its own?\n%s", out)
	}
	// And what B now reads is exactly the zombie's data.
	if out, err := ReadPattern(t, live, 0, 0xaa); err != nil {
		t.Fatalf("B does not read the zombie's 0xaa either: %v\n%s", err, out)
	}
}

// createImage creates a 64 MiB image (default features, so exclusive-lock
// is on) as client.admin and removes it at cleanup, after the domains
// using it are gone (cleanups run last-registered first).
func createImage(t *testing.T, adminConf, image string) {
	t.Helper()
	if out, err := rbdCmd(adminConf, "create", "--size", "64M", image); err != nil {
		t.Fatalf("rbd create %s: %v\n%s", image, err, out)
	}
	out, err := rbdCmd(adminConf, "info", "--format", "json", image)
	var info struct{ Features []string }
	if err == nil {
		err = json.Unmarshal([]byte(out), &info)
	}
	if err != nil || !slices.Contains(info.Features, "exclusive-lock") {
		t.Fatalf("rbd info %s: want feature exclusive-lock: %v\n%s", image, err, out)
	}
	t.Cleanup(func() {
		// A QEMU that was just killed may leave its watch for up to ~30 s.
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := rbdCmd(adminConf, "rm", "--no-progress", image)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("cleanup: rbd rm %s: %v\n%s", image, err, out)
				return
			}
			time.Sleep(2 * time.Second)
		}
	})
}

// lockOwner returns "locker address" of the image's exclusive lock
// (`rbd lock ls --format json`), failing the test unless there is exactly
// one.
func lockOwner(t *testing.T, adminConf, image string) string {
	t.Helper()
	out, err := rbdCmd(adminConf, "lock", "ls", "--format", "json", image)
	if err != nil {
		t.Fatalf("rbd lock ls %s: %v\n%s", image, err, out)
	}
	var locks []struct{ ID, Locker, Address string }
	if err := json.Unmarshal([]byte(out), &locks); err != nil {
		t.Fatalf("rbd lock ls %s: %v\n%s", image, err, out)
	}
	if len(locks) != 1 || !strings.HasPrefix(locks[0].ID, "auto ") {
		t.Fatalf("rbd lock ls %s: want one exclusive-lock (cookie auto ...), got %s", image, out)
	}
	return locks[0].Locker + " " + locks[0].Address
}

func rbdCmd(conf string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "rbd", append([]string{"--conf", conf}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func lastLines(s string, n int) string {
	return oneLine(tail(s, n))
}

func logTail(dom string) string {
	s, err := DomainLog(dom)
	if err != nil {
		return err.Error()
	}
	return tail(s, 15)
}
