package oned

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// CmdTimeout bounds one OpenNebula command or host command of a test.
var CmdTimeout = 5 * time.Minute

// One runs an OpenNebula command (onevm, onehost, ...) on the front-end as
// oneadmin and returns its output; a failure fails the test.
func (s *Stack) One(t testenv.T, args ...string) string {
	t.Helper()
	out, err := s.Try(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Try runs an OpenNebula command on the front-end and returns its stdout
// and an error that carries its stderr when it failed.
func (s *Stack) Try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
	defer cancel()
	return s.exec(ctx, args...)
}

// OnHost runs a shell command on host h, as root in its namespaces (what
// an operator's root shell there sees); a failure fails the test.
func (s *Stack) OnHost(t testenv.T, h Host, cmd string) string {
	t.Helper()
	out, err := s.TryHost(h, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TryHost runs a shell command on host h and returns its stdout.
func (s *Stack) TryHost(h Host, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
	defer cancel()
	return sh(ctx, "", "hosts.sh", "exec", h.Name, "bash", "-c", cmd)
}

// Host returns the stack's host named name.
func (s *Stack) Host(t testenv.T, name string) Host {
	t.Helper()
	for _, h := range s.all() {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("no host %s in %s", name, s.FE)
	return Host{}
}

// VM states of OpenNebula (include/VirtualMachine.h, 7.4.0 and 6.10.5).
const (
	StatePending   = 1
	StateHold      = 2
	StateActive    = 3
	StateStopped   = 4
	StateSuspended = 5
	StateDone      = 6
	StatePoweroff  = 8
	StateUndeploy  = 9

	LCMRunning             = 3
	LCMMigrate             = 4
	LCMUnknown             = 16
	LCMBootFailure         = 36
	LCMBootUndeployFailure = 47
)

// VM is what `onevm show -x` (one.vm.info) says about a VM.
type VM struct {
	ID       int          `xml:"ID"`
	Name     string       `xml:"NAME"`
	State    int          `xml:"STATE"`
	LCM      int          `xml:"LCM_STATE"`
	DeployID string       `xml:"DEPLOY_ID"`
	STime    int64        `xml:"STIME"`
	Resched  string       `xml:"RESCHED"` // "1": flagged for the scheduler to move
	Disks    []Disk       `xml:"TEMPLATE>DISK"`
	User     UserTemplate `xml:"USER_TEMPLATE"`
	History  []History    `xml:"HISTORY_RECORDS>HISTORY"`
}

// UserTemplate is the part of a VM's USER_TEMPLATE the tests read: the
// error oned writes there when a driver action fails, and rbdfence's
// collision events, one attribute each (RBDFENCE_EVENT_<time>_<hash>,
// internal/opennebula EventAttr).
type UserTemplate struct {
	Error      string      `xml:"ERROR"`
	Collisions string      `xml:"RBDFENCE_COLLISIONS"`
	Last       string      `xml:"RBDFENCE_LAST_COLLISION"`
	Attrs      []EventAttr `xml:",any"`
}

// EventAttr is one attribute of the user template read as an event.
type EventAttr struct {
	XMLName xml.Name
	Event
}

// Events are the user template's collision events.
func (u UserTemplate) Events() []Event {
	var out []Event
	for _, a := range u.Attrs {
		if n := a.XMLName.Local; n == "RBDFENCE_EVENT" || strings.HasPrefix(n, "RBDFENCE_EVENT_") {
			out = append(out, a.Event)
		}
	}
	return out
}

// Disk is one DISK of a VM's template.
type Disk struct {
	ID      int    `xml:"DISK_ID"`
	ImageID string `xml:"IMAGE_ID"`
	Source  string `xml:"SOURCE"`
	Clone   string `xml:"CLONE"`
	Target  string `xml:"TARGET"`
}

// Image is the RBD image QEMU opens for the disk of VM vm (DESIGN.md:
// SOURCE, with CLONE=YES the -<VMID>-<DISK_ID> suffix).
func (d Disk) Image(vm int) string {
	if d.Clone == "YES" {
		return fmt.Sprintf("%s-%d-%d", d.Source, vm, d.ID)
	}
	return d.Source
}

// Event is one RBDFENCE_EVENT of a VM's user template.
type Event struct {
	Action  string `xml:"ACTION"`
	Address string `xml:"ADDRESS"`
	Client  string `xml:"CLIENT"`
	Host    string `xml:"HOST"`
	Image   string `xml:"IMAGE"`
	Source  string `xml:"SOURCE"`
}

// History is one HISTORY record.
type History struct {
	Seq      int    `xml:"SEQ"`
	Hostname string `xml:"HOSTNAME"`
	Action   int    `xml:"ACTION"`
	// RSTime is when the VM began running there (0 before).
	RSTime int64 `xml:"RSTIME"`
}

// MigratedTo: the VM is RUNNING on host after a migration to it completed.
// one.vm.migrate adds the destination's history record and returns before
// the life-cycle manager moves the VM to MIGRATE (6.10.5:
// src/rm/RequestManagerVirtualMachine.cc:1409-1427,
// src/dm/DispatchManagerActions.cc:239; 7.4.0 alike,
// src/dm/DispatchManagerActions.cc:166): meanwhile one.vm.info shows
// RUNNING on the destination. The migration's success sets the new
// record's RSTIME (src/lcm/LifeCycleStates.cc:285-293 in 6.10.5).
func (v *VM) MigratedTo(host string) bool {
	return v.Running() && v.Host() == host && v.History[len(v.History)-1].RSTime != 0
}

// Host is the VM's current host ("" before its first deploy).
func (v *VM) Host() string {
	if len(v.History) == 0 {
		return ""
	}
	return v.History[len(v.History)-1].Hostname
}

// String is the VM's state for messages.
func (v *VM) String() string {
	return fmt.Sprintf("VM %d state %d lcm %d host %q error %q", v.ID, v.State, v.LCM, v.Host(), v.User.Error)
}

// Running: ACTIVE/RUNNING.
func (v *VM) Running() bool { return v.State == StateActive && v.LCM == LCMRunning }

// ShowVM is `onevm show -x ID`, read through oned's API (one.vm.info).
func (s *Stack) ShowVM(t testenv.T, id int) *VM {
	t.Helper()
	v, err := s.vmInfo(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (s *Stack) vmInfo(id int) (*VM, error) {
	out, err := s.RPC("one.vm.info", id, false)
	if err != nil {
		return nil, err
	}
	var v VM
	if err := xml.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("one.vm.info %d: %v\n%s", id, err, tail(out, 20))
	}
	return &v, nil
}

// WaitVM polls the VM (one.vm.info, twice a second) until ok holds (at
// most within) and returns the VM then; otherwise it fails the test with
// the VM's state and log.
func (s *Stack) WaitVM(t testenv.T, id int, what string, within time.Duration, ok func(*VM) bool) *VM {
	t.Helper()
	deadline := time.Now().Add(within)
	var v *VM
	for {
		v = s.ShowVM(t, id)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("VM %d is not %s after %s: %s\n%s", id, what, within, v, s.VMLog(t, id))
	return nil
}

// WaitRunning waits for ACTIVE/RUNNING; a failure state fails at once.
func (s *Stack) WaitRunning(t testenv.T, id int) *VM {
	t.Helper()
	return s.WaitVM(t, id, "RUNNING", CmdTimeout, func(v *VM) bool {
		if v.State == StateActive && failureLCM(v.LCM) {
			t.Fatalf("VM %d failed while waiting for RUNNING: %s\n%s", id, v, s.VMLog(t, id))
		}
		return v.Running()
	})
}

// failureLCM: the *_FAILURE LCM states (include/VirtualMachine.h).
func failureLCM(lcm int) bool {
	switch lcm {
	case 14, 36, 37, 38, 39, 40, 41, 42, 44, 46, 47, 48, 49, 50, 61:
		return true
	}
	return false
}

// prologLCM says whether LCM state lcm is a PROLOG state or its failure,
// whose recover --success is the boot (include/VirtualMachine.h:76-140 and
// src/lcm/LifeCycleActions.cc:1371-1392 of release-7.4.0; in 60 and 61,
// from a host in UNKNOWN, tm/ceph/mv moves nothing).
func prologLCM(lcm int) bool {
	switch lcm {
	case 1, 8, 9, 31, 38, 39, 43, 44, 45, 46, 49, 50, 60, 61:
		return true
	}
	return false
}

// VMLog is the tail of the VM's log on the front-end (ONE_LOCATION layout:
// var/vms/<ID>/vm.log).
func (s *Stack) VMLog(t testenv.T, id int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, s.FE, "one/var/vms", strconv.Itoa(id), "vm.log"))
	if err != nil {
		return "(no VM log: " + err.Error() + ")"
	}
	return tail(string(b), 40)
}

// Image is one datablock image of the Ceph image datastore.
type Image struct {
	ID     int
	Source string // pool/one-<ID>
}

// NewImage creates an 8 MiB datablock in the Ceph image datastore (the ceph
// DS driver's mkfs: rbd create) and waits until it is READY.
func (s *Stack) NewImage(t testenv.T, name string, persistent bool) Image {
	t.Helper()
	args := []string{"oneimage", "create", "-d", strconv.Itoa(s.ImageDS), "--name", name, "--type", "DATABLOCK", "--size", "8"}
	if persistent {
		args = append(args, "--persistent")
	}
	id, err := parseID(s.One(t, args...))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(CmdTimeout)
	for {
		out, err := s.RPC("one.image.info", id, false)
		if err != nil {
			t.Fatal(err)
		}
		st := xmlField(out, "STATE")
		if st == "1" { // READY
			return Image{ID: id, Source: xmlField(out, "SOURCE")}
		}
		if st == "5" || time.Now().After(deadline) { // ERROR
			t.Fatalf("image %d not READY (state %s): %s", id, st, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// NewSharedImage is NewImage, persistent, with PERSISTENT_TYPE SHAREABLE:
// several VMs may use it at once and each gets its disk with SHAREABLE
// YES (src/image/Image.cc:653-662 of release-7.4.0, raw format only).
func (s *Stack) NewSharedImage(t testenv.T, name string) Image {
	t.Helper()
	img := s.NewImage(t, name, true)
	s.One(t, "bash", "-c", fmt.Sprintf(`f=$(mktemp) && echo 'PERSISTENT_TYPE = "SHAREABLE"' >"$f" && oneimage update --append %d "$f"; rc=$?; rm -f "$f"; exit $rc`, img.ID))
	return img
}

// VMTemplate is a VM without guest OS: one vCPU of a tenth of a core, 64 MiB,
// the disks given, virtio (so libvirt names the first disk virtio-disk0),
// no NIC and no graphics. QEMU runs its firmware and waits.
func VMTemplate(name string, disks ...Image) string {
	var b strings.Builder
	fmt.Fprintf(&b, "NAME = \"%s\"\nCPU = \"0.1\"\nVCPU = \"1\"\nMEMORY = \"64\"\n", name)
	for _, d := range disks {
		fmt.Fprintf(&b, "DISK = [ IMAGE_ID = \"%d\", DEV_PREFIX = \"vd\" ]\n", d.ID)
	}
	return b.String()
}

// NewVM creates a VM from tpl (onevm create --hold) and returns its ID; HOLD.
func (s *Stack) NewVM(t testenv.T, tpl string) int {
	t.Helper()
	f, err := os.CreateTemp(s.dir, "vm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(tpl); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// --hold: oned 7.x's scheduler would place a PENDING VM by itself
	// (SCHED_MAD); the test deploys it with onevm deploy.
	id, err := parseID(s.One(t, "onevm", "create", "--hold", f.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.Try("onevm", "recover", "--delete", strconv.Itoa(id)) })
	return id
}

// DeployNew creates a VM named name with one disk, a new image (persistent
// or not) of the same name, deploys it on h and returns its ID, image and
// state once RUNNING.
func (s *Stack) DeployNew(t testenv.T, name string, persistent bool, h Host) (int, Image, *VM) {
	t.Helper()
	img := s.NewImage(t, name, persistent)
	vm := s.NewVM(t, VMTemplate(name, img))
	return vm, img, s.Deploy(t, vm, h)
}

// QEMUClient is the one client address of image from VM vm's QEMU on h;
// none or several fail the test.
func (s *Stack) QEMUClient(t testenv.T, h Host, vm int, image string) string {
	t.Helper()
	c := s.QEMUClients(t, h, image)
	if len(c) != 1 {
		t.Fatalf("VM %d's QEMU on %s: clients %v of %s, want 1", vm, h.Name, c, image)
	}
	return c[0]
}

// Deploy is `onevm deploy ID HOST SYSTEM_DS`, then RUNNING.
func (s *Stack) Deploy(t testenv.T, id int, h Host) *VM {
	t.Helper()
	s.One(t, "onevm", "deploy", strconv.Itoa(id), h.Name, strconv.Itoa(s.SystemDS))
	return s.WaitRunning(t, id)
}

// GuestWrite makes the VM's QEMU on host h write pattern to the first 4 KiB
// of its first virtio disk (HMP qemu-io, DESIGN.md) and says whether the
// write succeeded. qemu-io's result lands in the domain's QEMU log on the
// host (/var/log/libvirt/qemu/one-ID.log), read from where it began.
func (s *Stack) GuestWrite(t testenv.T, h Host, vm int, pattern byte) bool {
	t.Helper()
	return s.GuestWriteDisk(t, h, vm, 0, pattern)
}

// GuestWriteDisk is GuestWrite to the VM's disk-th virtio disk (0: vda,
// libvirt's virtio-disk0; 1: vdb).
func (s *Stack) GuestWriteDisk(t testenv.T, h Host, vm, disk int, pattern byte) bool {
	t.Helper()
	dom := fmt.Sprintf("one-%d", vm)
	logf := s.hostFS(h, "var-log/libvirt/qemu/"+dom+".log")
	var off int64
	if st, err := os.Stat(logf); err == nil {
		off = st.Size()
	}
	s.OnHost(t, h, fmt.Sprintf(`virsh -q qemu-monitor-command %s --hmp 'qemu-io -d /machine/peripheral/virtio-disk%d/virtio-backend "write -P 0x%02x 0 4k"'`, dom, disk, pattern))
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(logf)
		if int64(len(b)) < off {
			off = 0 // a new log (the domain was created anew)
		}
		out := string(b[off:])
		switch {
		case strings.Contains(out, "wrote 4096/4096 bytes at offset 0"):
			return true
		case strings.Contains(out, "write failed"):
			return false
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu-io on %s (%s) gave no result in 30s; log since: %q", dom, h.Name, tail(out, 10))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitHost waits until host name is in state want (MONITORED, ERROR, ...).
func (s *Stack) WaitHost(t testenv.T, name, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.waitHostState(ctx, name, want, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}
