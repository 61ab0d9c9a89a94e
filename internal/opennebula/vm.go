package opennebula

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// defaultCephPort is the monitor port used when CEPH_HOST gives none
// (LibVirtDriver::CEPH_DEFAULT_PORT).
const defaultCephPort = "6789"

// defaultPool is the pool of volatile RBD disks when the disk has no
// POOL_NAME (the KVM driver's default).
const defaultPool = "one"

// VMInfo is what rbdfence needs to know about an OpenNebula VM.
type VMInfo struct {
	ID       int
	Name     string
	State    int // STATE (VM_STATE: 3 ACTIVE, 8 POWEROFF, ...)
	LCMState int // LCM_STATE (3 RUNNING, 2 BOOT, ...)
	// Host, HostID, Seq and SystemDSID come from the last HISTORY record
	// (highest SEQ): the host the VM is placed on, OpenNebula's deploy
	// sequence number and the system datastore. Seq, HostID and SystemDSID
	// are -1 and Host is "" when the VM has no history yet.
	Host       string
	HostID     int
	Seq        int
	SystemDSID int
	// Stime is /VM/STIME: when oned created the VM (constant; with the id
	// it names the VM among installations, engine.Claim.Stime). 0 when
	// absent.
	Stime int64
	// History is every HISTORY record one.vm.info lists (pool calls only
	// the last), in SEQ order.
	History []Placement
	// TMMadSystem is TEMPLATE/TM_MAD_SYSTEM: the system datastore's transfer
	// driver (e.g. "ceph", "ssh", "shared").
	TMMadSystem string
	// Disks are the RBD images QEMU opens for this VM, in DISK order.
	Disks []vmdisk.Disk
	// Skipped are the DISKs that are not RBD images opened by QEMU.
	Skipped []SkippedDisk
}

// Placement is one HISTORY record: deploy Seq on the host named Host.
type Placement struct {
	Seq  int
	Host string
	// Stime is the record's STIME: when oned started it (0 when absent).
	Stime int64
}

// SkippedDisk is a DISK that rbdfence does not check, and why.
type SkippedDisk struct {
	ID     string // DISK_ID ("" if absent)
	Reason string
}

// VM returns the VM with the given id, read with one.vm.info. Errors wrap
// ErrNotFound, ErrAuthentication, ErrUnreachable... (see Error).
//
// Similar To: onevm show -x ID
func (c *Client) VM(ctx context.Context, id int) (*VMInfo, error) {
	n, err := c.vmNode(ctx, id)
	if err != nil {
		return nil, err
	}
	info, err := vmFromNode(n)
	if err != nil {
		return nil, fmt.Errorf("one.vm.info %d: %w", id, err)
	}
	return info, nil
}

// vmNode fetches the raw <VM> document of one VM.
func (c *Client) vmNode(ctx context.Context, id int) (*xnode, error) {
	body, err := c.callString(ctx, "one.vm.info", id, false)
	if err != nil {
		return nil, err
	}
	n, err := parseXMLTree([]byte(body), "VM")
	if err != nil {
		return nil, &Error{Method: "one.vm.info", Err: err, kind: ErrProtocol}
	}
	return n, nil
}

// ParseVM reads a <VM> document as one.vm.info (or one.vmpool.infoextended)
// returns it. It is what Client.VM uses.
func ParseVM(xmlDoc []byte) (*VMInfo, error) {
	n, err := parseXMLTree(xmlDoc, "VM")
	if err != nil {
		return nil, err
	}
	return vmFromNode(n)
}

// vmFromNode builds a VMInfo from a parsed <VM> element.
func vmFromNode(n *xnode) (*VMInfo, error) {
	id, err := intChild(n, "ID", true)
	if err != nil {
		return nil, err
	}
	if id < 0 {
		return nil, fmt.Errorf("VM ID %d is negative", id)
	}
	info := &VMInfo{ID: id, HostID: -1, Seq: -1, SystemDSID: -1}
	if nm := n.child("NAME"); nm != nil {
		info.Name = nm.text
	}
	if info.State, err = intChild(n, "STATE", true); err != nil {
		return nil, fmt.Errorf("VM %d: %w", id, err)
	}
	if info.LCMState, err = intChild(n, "LCM_STATE", true); err != nil {
		return nil, fmt.Errorf("VM %d: %w", id, err)
	}
	if st := n.child("STIME"); st != nil {
		v, err := strconv.ParseInt(strings.TrimSpace(st.text), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("VM %d: STIME %q is not a time", id, clip(st.text))
		}
		info.Stime = v
	}
	if err := readHistory(n, info); err != nil {
		return nil, fmt.Errorf("VM %d: %w", id, err)
	}
	tmpl := templateFrom(n.child("TEMPLATE"))
	if v, ok := tmpl.single("TM_MAD_SYSTEM"); ok {
		info.TMMadSystem = strings.TrimSpace(v)
	}
	for _, a := range tmpl {
		if a.name != "DISK" {
			continue
		}
		if !a.isVec {
			info.Skipped = append(info.Skipped, SkippedDisk{Reason: "DISK is not a vector attribute"})
			continue
		}
		d, reason, err := diskFromAttr(id, a, info.TMMadSystem)
		if err != nil {
			return nil, fmt.Errorf("VM %d: %w", id, err)
		}
		if reason != "" {
			did, _ := a.get("DISK_ID")
			info.Skipped = append(info.Skipped, SkippedDisk{ID: strings.TrimSpace(did), Reason: reason})
			continue
		}
		info.Disks = append(info.Disks, d)
	}
	return info, nil
}

// readHistory fills Host, HostID, Seq and SystemDSID from the HISTORY record
// with the highest SEQ (one.vm.info lists them all, pool calls only the last).
func readHistory(n *xnode, info *VMInfo) error {
	hr := n.child("HISTORY_RECORDS")
	if hr == nil {
		return nil
	}
	for _, h := range hr.children("HISTORY") {
		seq, err := intChild(h, "SEQ", true)
		if err != nil {
			return fmt.Errorf("HISTORY: %w", err)
		}
		if seq < 0 {
			return fmt.Errorf("HISTORY: SEQ %d is negative", seq)
		}
		p := Placement{Seq: seq}
		if hn := h.child("HOSTNAME"); hn != nil {
			p.Host = strings.TrimSpace(hn.text)
		}
		if st := h.child("STIME"); st != nil {
			v, err := strconv.ParseInt(strings.TrimSpace(st.text), 10, 64)
			if err != nil {
				return fmt.Errorf("HISTORY %d: STIME %q is not a time", seq, clip(st.text))
			}
			p.Stime = v
		}
		info.History = append(info.History, p)
		if seq < info.Seq {
			continue
		}
		hid, err := intChild(h, "HID", false)
		if err != nil {
			return fmt.Errorf("HISTORY %d: %w", seq, err)
		}
		ds, err := intChild(h, "DS_ID", false)
		if err != nil {
			return fmt.Errorf("HISTORY %d: %w", seq, err)
		}
		info.Seq, info.HostID, info.SystemDSID = seq, hid, ds
		info.Host = p.Host
	}
	sort.Slice(info.History, func(i, j int) bool { return info.History[i].Seq < info.History[j].Seq })
	return nil
}

// intChild parses the integer text of child name. A missing optional child
// yields -1.
func intChild(n *xnode, name string, required bool) (int, error) {
	c := n.child(name)
	if c == nil {
		if required {
			return 0, fmt.Errorf("no %s element", name)
		}
		return -1, nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(c.text))
	if err != nil {
		return 0, fmt.Errorf("%s %q is not an integer", name, clip(c.text))
	}
	return v, nil
}

// diskFromAttr applies the KVM driver's rules (LibVirtDriverKVM.cc) to one
// DISK vector: it returns the RBD image QEMU opens, or a reason to skip the
// disk, or an error when the disk is RBD but its image cannot be named.
func diskFromAttr(vmID int, a attr, vmTMMadSystem string) (vmdisk.Disk, string, error) {
	get := func(k string) string { v, _ := a.get(k); return v }
	rawID, hasID := a.get("DISK_ID")
	diskID := strings.TrimSpace(rawID)
	where := "DISK"
	if hasID {
		where = fmt.Sprintf("DISK %q", clip(diskID))
	}

	typ, dtype := get("TYPE"), get("DISK_TYPE")

	// In SSH mode (image DS used with an ssh system DS) the disk is copied
	// to the host and QEMU opens a local file; oned then also sets TYPE and
	// DISK_TYPE from DISK_TYPE_SSH (FILE). The DISK's own TM_MAD_SYSTEM
	// wins; the VM's applies to disks that have none.
	tms, ok := a.get("TM_MAD_SYSTEM")
	if !ok {
		tms = vmTMMadSystem
	}
	if strings.EqualFold(strings.TrimSpace(tms), "ssh") {
		return vmdisk.Disk{}, fmt.Sprintf("TM_MAD_SYSTEM=ssh: QEMU opens a local copy (TYPE=%s)", clip(typ)), nil
	}

	// The driver compares exact upper-case strings; for volatile disks
	// (TYPE fs/swap) it uses DISK_TYPE as the type.
	effective := typ
	if up := strings.ToUpper(typ); up == "FS" || up == "SWAP" {
		effective = dtype
	}
	switch effective {
	case "BLOCK", "BLOCK_CDROM", "ISCSI":
		return vmdisk.Disk{}, fmt.Sprintf("TYPE=%s: not RBD", clip(effective)), nil
	}
	if effective != "RBD" && effective != "RBD_CDROM" && dtype != "RBD" {
		return vmdisk.Disk{}, fmt.Sprintf("TYPE=%s DISK_TYPE=%s: not RBD", clip(typ), clip(dtype)), nil
	}

	// Image name: SOURCE, with "-VMID-DISKID" for clones; volatile disks
	// (no SOURCE) are POOL_NAME/one-sys-VMID-DISKID.
	if !hasID {
		return vmdisk.Disk{}, "", fmt.Errorf("RBD %s has no DISK_ID", where)
	}
	if n, err := strconv.Atoi(diskID); err != nil || n < 0 {
		return vmdisk.Disk{}, "", fmt.Errorf("RBD %s: DISK_ID is not a non-negative integer", where)
	}
	source := get("SOURCE")
	var image string
	switch {
	case source == "":
		pool := get("POOL_NAME")
		if pool == "" {
			pool = defaultPool
		}
		image = fmt.Sprintf("%s/one-sys-%d-%s", pool, vmID, diskID)
	case get("CLONE") == "YES":
		image = fmt.Sprintf("%s-%d-%s", source, vmID, diskID)
	default:
		image = source
	}
	pool, ns, name, err := vmdisk.ParseImage(image)
	if err != nil {
		return vmdisk.Disk{}, "", fmt.Errorf("RBD %s: %w", where, err)
	}
	mons, err := parseMonitors(get("CEPH_HOST"))
	if err != nil {
		return vmdisk.Disk{}, "", fmt.Errorf("RBD %s: CEPH_HOST: %w", where, err)
	}
	return vmdisk.Disk{
		ID:        diskID,
		Pool:      pool,
		Namespace: ns,
		Name:      name,
		Monitors:  mons,
		User:      strings.TrimPrefix(strings.TrimSpace(get("CEPH_USER")), "client."),
		// CEPH_KEY names a key file (OpenNebula passes it to `rbd
		// --keyfile`, src/tm_mad/ceph/clone:109 of release-7.4.0); the
		// Ceph adapter also takes a keyring there (ceph.KeySource).
		Keyring: strings.TrimSpace(get("CEPH_KEY")),
		Conf:    strings.TrimSpace(get("CEPH_CONF")),
		// The driver writes <shareable/> only for "YES"; we never fence a
		// disk marked shareable in any case.
		Shareable: strings.EqualFold(strings.TrimSpace(get("SHAREABLE")), "YES"),
		ReadOnly:  strings.EqualFold(strings.TrimSpace(get("READONLY")), "YES"),
	}, "", nil
}

// parseMonitors splits CEPH_HOST ("host[:port] ..."; IPv6 as [addr]:port
// or a bare address) into "host:port" entries, port defaulting to 6789.
func parseMonitors(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Fields(s) {
		host, port, err := splitMonitor(f)
		if err != nil {
			return nil, err
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}

func splitMonitor(f string) (host, port string, err error) {
	switch {
	case strings.HasPrefix(f, "["):
		end := strings.IndexByte(f, ']')
		if end < 0 {
			return "", "", fmt.Errorf("monitor %q: missing ']'", clip(f))
		}
		rest := f[end+1:]
		host = f[1:end]
		if ip := net.ParseIP(host); ip == nil || ip.To4() != nil {
			return "", "", fmt.Errorf("monitor %q: %q is not an IPv6 address", clip(f), clip(host))
		}
		switch {
		case rest == "":
			port = defaultCephPort
		case rest[0] == ':':
			port = rest[1:]
		default:
			return "", "", fmt.Errorf("monitor %q: unexpected %q after ']'", clip(f), clip(rest))
		}
	case strings.Count(f, ":") > 1:
		if ip := net.ParseIP(f); ip == nil || ip.To4() != nil {
			return "", "", fmt.Errorf("monitor %q: want host[:port] (IPv6 in brackets)", clip(f))
		}
		host, port = f, defaultCephPort
	default:
		var ok bool
		host, port, ok = strings.Cut(f, ":")
		if !ok {
			port = defaultCephPort
		}
	}
	if ip := net.ParseIP(host); ip == nil && !validHostname(host) {
		return "", "", fmt.Errorf("monitor %q: bad host", clip(f))
	}
	p, perr := strconv.Atoi(port)
	if perr != nil || p < 1 || p > 65535 {
		return "", "", fmt.Errorf("monitor %q: bad port %q", clip(f), clip(port))
	}
	return host, strconv.Itoa(p), nil
}

// validHostname accepts DNS names and IPv4 addresses: letters, digits,
// '-', '.' and '_'.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

// clip shortens s for error messages and keeps it on one line.
func clip(s string) string {
	const max = 80
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
