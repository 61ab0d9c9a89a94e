// Package libvirttest drives a real libvirtd and real QEMU domains for
// rbdfence's tests: minimal guest-less domains with RBD disks (as OpenNebula
// writes them), virsh with timeouts, and qemu-io inside a running QEMU to
// read and write a disk the way a guest would.
//
// The daemons come from test/libvirt/env.sh and the Ceph cluster from
// test/ceph/cluster.sh (see StartLibvirt and StartCeph). Nothing here is a
// fake: a failure to start them fails the test.
package libvirttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"
)

// VirshTimeout bounds every virsh call.
const VirshTimeout = 60 * time.Second

// QemuIOTimeout bounds the wait for a qemu-io command's output in the
// domain log.
const QemuIOTimeout = 20 * time.Second

// DefaultURI is the libvirt connection used when RBDFENCE_TEST_LIBVIRT_URI
// is not set.
const DefaultURI = "qemu:///system"

// QemuLogDir is where libvirt (through virtlogd) writes each domain's QEMU
// stdout and stderr, one DOMAIN.log per domain name.
const QemuLogDir = "/var/log/libvirt/qemu"

// RBDDisk is one RBD image to attach to a test domain, with the cephx
// access OpenNebula gives QEMU: monitor host, user and libvirt secret.
type RBDDisk struct {
	// Image is "pool/name" (or "pool/namespace/name").
	Image string
	// Mon is the monitor as "IP:PORT" ("[v6]:PORT" for IPv6).
	Mon string
	// User is the cephx id without "client." (e.g. "libvirt").
	User string
	// SecretUUID is the libvirt ceph secret holding User's key.
	SecretUUID string
	// Shareable marks the disk <shareable/> (OpenNebula SHAREABLE=YES).
	Shareable bool
}

// DomainXML returns a minimal domain that starts without a guest OS, also
// under TCG (domType "qemu"); domType "kvm" uses KVM. Disks become virtio
// disks vda, vdb, ... in order; libvirt names their QEMU devices
// virtio-disk0, virtio-disk1, ... (see QemuIO). cache='none' makes every
// write reach the OSDs at once. It panics on a disk whose Mon is not
// HOST:PORT (a bug in the calling test).
func DomainXML(name string, domType string, disks []RBDDisk) string {
	dom := &libvirtxml.Domain{
		Type:   domType,
		Name:   name,
		Memory: &libvirtxml.DomainMemory{Value: 64, Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: 1},
		OS: &libvirtxml.DomainOS{
			Type: &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"},
		},
		// No bootable disk: SeaBIOS retries with a reset every 60 s, so
		// on_reboot must stay "restart" or the domain would vanish.
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			MemBalloon: &libvirtxml.DomainMemBalloon{Model: "none"},
		},
	}
	for i, d := range disks {
		host, port, err := net.SplitHostPort(d.Mon)
		if err != nil {
			panic(fmt.Sprintf("libvirttest.DomainXML: disk %d: monitor %q: %v", i, d.Mon, err))
		}
		disk := libvirtxml.DomainDisk{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw", Cache: "none"},
			Source: &libvirtxml.DomainDiskSource{
				Network: &libvirtxml.DomainDiskSourceNetwork{
					Protocol: "rbd",
					Name:     d.Image,
					Hosts:    []libvirtxml.DomainDiskSourceHost{{Name: host, Port: port}},
				},
			},
			Target: &libvirtxml.DomainDiskTarget{Dev: DiskTarget(i), Bus: "virtio"},
		}
		if d.User != "" {
			// Where OpenNebula's LibVirtDriverKVM writes it: a child of <disk>.
			disk.Auth = &libvirtxml.DomainDiskAuth{
				Username: d.User,
				Secret:   &libvirtxml.DomainDiskSecret{Type: "ceph", UUID: d.SecretUUID},
			}
		}
		if d.Shareable {
			disk.Shareable = &libvirtxml.DomainDiskShareable{}
		}
		dom.Devices.Disks = append(dom.Devices.Disks, disk)
	}
	s, err := dom.Marshal()
	if err != nil {
		panic(fmt.Sprintf("libvirttest.DomainXML: %v", err))
	}
	return s
}

// DiskTarget returns the target dev of the i-th disk: vda, vdb, ..., vdz.
func DiskTarget(i int) string {
	if i < 0 || i >= 26 {
		panic(fmt.Sprintf("libvirttest.DiskTarget: disk index %d out of range", i))
	}
	return "vd" + string(rune('a'+i))
}

// URI returns the libvirt connection URI of the tests.
func URI() string {
	if u := os.Getenv("RBDFENCE_TEST_LIBVIRT_URI"); u != "" {
		return u
	}
	return DefaultURI
}

// Virsh runs `virsh -c URI args...` with VirshTimeout and returns its
// stdout. The error carries the arguments and virsh's stderr.
func Virsh(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), VirshTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "virsh", append([]string{"-c", URI()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return stdout.String(), fmt.Errorf("virsh %s: timed out after %s", strings.Join(args, " "), VirshTimeout)
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("virsh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Create starts a transient domain from xml (`virsh create` of a temp
// file), fails the test if it does not start, and registers a cleanup that
// destroys it. It returns the domain name and how long the start took.
func Create(t testing.TB, xml string) (name string, took time.Duration) {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		t.Fatalf("libvirttest.Create: bad domain XML: %v", err)
	}
	name = d.Name
	f := filepath.Join(t.TempDir(), name+".xml")
	if err := os.WriteFile(f, []byte(xml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Destroy(name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	start := time.Now()
	if _, err := Virsh("create", f); err != nil {
		log, _ := DomainLog(name)
		t.Fatalf("libvirttest.Create %s: %v\n--- %s (tail) ---\n%s", name, err, LogPath(name), tail(log, 20))
	}
	return name, time.Since(start)
}

// Destroy stops a domain (`virsh destroy`) and undefines it if it was
// persistent. A domain that does not exist (any more) is not an error.
func Destroy(name string) error {
	_, err := Virsh("destroy", name)
	if err != nil && !notFound(err) && !notRunning(err) {
		return err
	}
	if _, err := Virsh("undefine", name); err != nil && !notFound(err) {
		return err
	}
	return nil
}

func notFound(err error) bool {
	s := err.Error()
	return strings.Contains(s, "failed to get domain") || strings.Contains(s, "Domain not found")
}

func notRunning(err error) bool {
	return strings.Contains(err.Error(), "domain is not running")
}

// LogPath is the QEMU log of domain name.
func LogPath(name string) string {
	return filepath.Join(QemuLogDir, name+".log")
}

// DomainLog returns the whole QEMU log of domain name. The log keeps the
// output of earlier domains of the same name.
func DomainLog(name string) (string, error) {
	b, err := os.ReadFile(LogPath(name))
	return string(b), err
}

// domainLocks serialises QemuIO per domain so that outputs do not mix.
var domainLocks sync.Map // domain name -> *sync.Mutex

// QemuIO runs one qemu-io command (e.g. "write -P 0xab 0 4k") on the
// diskIndex-th disk of a running domain and returns its output.
//
// It sends `qemu-io -d /machine/peripheral/virtio-disk<N>/virtio-backend
// "<cmd>"` over the HMP monitor (libvirt uses -blockdev, so the disk has
// no drive name; -d addresses it by its qdev path). The monitor reply is
// empty: qemu-io prints to QEMU's stdout, which virtlogd appends to
// /var/log/libvirt/qemu/DOMAIN.log. So QemuIO notes the log size before
// the command and, after the monitor returns, reads what was appended
// until the command's output is complete (a statistics line, or a
// "... failed" line), or nothing more arrives for a short while for
// commands that print neither. The monitor reply, if any, comes first.
// The test fails if virsh fails or no output arrives within QemuIOTimeout.
func QemuIO(t testing.TB, dom string, diskIndex int, cmd string) string {
	t.Helper()
	out, err := qemuIO(dom, diskIndex, cmd)
	if err != nil {
		t.Fatalf("libvirttest.QemuIO: %v", err)
	}
	return out
}

func qemuIO(dom string, diskIndex int, cmd string) (string, error) {
	if strings.ContainsAny(cmd, "\"\\\n") {
		return "", fmt.Errorf("qemu-io command %q: quotes, backslashes and newlines are not supported", cmd)
	}
	mu, _ := domainLocks.LoadOrStore(dom, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()

	logPath := LogPath(dom)
	offset, err := fileSize(logPath)
	if err != nil {
		return "", fmt.Errorf("domain %s: %w", dom, err)
	}
	hmp := fmt.Sprintf("qemu-io -d /machine/peripheral/virtio-disk%d/virtio-backend \"%s\"", diskIndex, cmd)
	reply, err := Virsh("qemu-monitor-command", dom, "--hmp", hmp)
	if err != nil {
		return "", err
	}
	reply = strings.TrimSpace(reply)
	out, err := waitLogOutput(logPath, offset, QemuIOTimeout)
	if reply != "" {
		out = reply + "\n" + out
	}
	if err != nil {
		return out, fmt.Errorf("domain %s disk %d %q: %w", dom, diskIndex, cmd, err)
	}
	return out, nil
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// qemuIODone matches the last line qemu-io prints for a finished read or
// write ("4 KiB, 1 ops; 00.00 sec (...)") or a failed one ("write failed:
// ...", "read failed: ...").
var qemuIODone = regexp.MustCompile(`(?m)(, \d+ ops; .*\)$|^\S+ failed: .*$)`)

// settle is how long the log must stay unchanged before output that has
// no recognised last line is taken as complete.
const settle = 500 * time.Millisecond

// waitLogOutput returns the text appended to path after offset once it
// looks complete. A log that shrank was rotated by virtlogd: read it from
// the start.
func waitLogOutput(path string, offset int64, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var out string
	lastChange := time.Now()
	for {
		s, err := readFrom(path, offset)
		if err != nil {
			return out, err
		}
		if s != out {
			out, lastChange = s, time.Now()
		}
		if qemuIODone.MatchString(out) {
			return out, nil
		}
		if out != "" && strings.HasSuffix(out, "\n") && time.Since(lastChange) >= settle {
			return out, nil
		}
		if time.Now().After(deadline) {
			if out == "" {
				return "", fmt.Errorf("no qemu-io output in %s after %s", path, timeout)
			}
			return out, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFrom(path string, offset int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if fi.Size() < offset {
		offset = 0
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "", err
	}
	b, err := io.ReadAll(f)
	return string(b), err
}

// ErrPatternMismatch is returned by ReadPattern when the data on disk is
// not the expected pattern.
var ErrPatternMismatch = errors.New("pattern verification failed")

// WritePattern writes pattern over the first 4 KiB of the diskIndex-th
// disk (`write -P <pattern> 0 4k`) and returns qemu-io's output. The error
// is non-nil when the write did not complete (e.g. "write failed: Cannot
// send after transport endpoint shutdown" for a blocklisted QEMU).
func WritePattern(t testing.TB, dom string, diskIndex int, pattern byte) (string, error) {
	t.Helper()
	out := QemuIO(t, dom, diskIndex, fmt.Sprintf("write -P 0x%02x 0 4k", pattern))
	if !strings.Contains(out, "wrote 4096/4096 bytes at offset 0") {
		return out, fmt.Errorf("%s disk %d: write 0x%02x did not complete: %s", dom, diskIndex, pattern, oneLine(out))
	}
	return out, nil
}

// ReadPattern reads the first 4 KiB of the diskIndex-th disk and checks
// that every byte is pattern (`read -P <pattern> 0 4k`). It returns
// ErrPatternMismatch when qemu-io reports "Pattern verification failed",
// another error when the read itself failed, and the output in any case.
func ReadPattern(t testing.TB, dom string, diskIndex int, pattern byte) (string, error) {
	t.Helper()
	out := QemuIO(t, dom, diskIndex, fmt.Sprintf("read -P 0x%02x 0 4k", pattern))
	switch {
	case !strings.Contains(out, "read 4096/4096 bytes at offset 0"):
		return out, fmt.Errorf("%s disk %d: read did not complete: %s", dom, diskIndex, oneLine(out))
	case strings.Contains(out, "Pattern verification failed"):
		return out, ErrPatternMismatch
	}
	return out, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
