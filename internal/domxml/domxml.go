// Package domxml reads what rbdfence needs from a libvirt domain XML: the
// domain's identity, the OpenNebula VM it belongs to and every RBD disk QEMU
// opens for it. The libvirt qemu hook gets that XML on stdin.
//
// Pure Go (no cgo): parsing is done with libvirt.org/go/libvirtxml.
package domxml

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// openNebulaNS is the XML namespace of the metadata OpenNebula writes into
// every KVM domain (`<metadata><one:vm xmlns:one="...">`).
const openNebulaNS = "http://opennebula.org/xmlns/libvirt/1.0"

// defaultCephPort is the monitor port used when a `<host>` has no port, as
// OpenNebula's LibVirtDriver (CEPH_DEFAULT_PORT) and librados do.
const defaultCephPort = "6789"

// Domain is what rbdfence takes from one libvirt domain definition.
type Domain struct {
	// Name is the libvirt domain name; OpenNebula uses "one-<VMID>".
	Name string
	// UUID is the libvirt domain UUID (OpenNebula's DEPLOY_ID); empty when
	// the XML has none (libvirt generates one at define time).
	UUID string
	// VMID is the OpenNebula VM id taken from a name "one-<N>", or -1 when
	// the name has another form.
	VMID int
	// Disks are the network disks with source protocol rbd, in document
	// order. ID is the target dev (vda, sdb, ...).
	Disks []vmdisk.Disk
	// OpenNebula is the `<one:vm>` metadata block, nil when absent.
	OpenNebula *OpenNebulaMeta
}

// OpenNebulaMeta is the `<metadata><one:vm>` block that OpenNebula's
// LibVirtDriverKVM writes into every deployment file (5.x to 7.x).
type OpenNebulaMeta struct {
	// SystemDatastore is the VM's directory on the host, e.g.
	// "/var/lib/one//datastores/0/42".
	SystemDatastore string `xml:"system_datastore"`
	// Name is the OpenNebula VM name (not the libvirt domain name).
	Name string `xml:"name"`
	// UName, UID, GName, GID: the VM's owner and group.
	UName string `xml:"uname"`
	UID   int    `xml:"uid"`
	GName string `xml:"gname"`
	GID   int    `xml:"gid"`
	// OpenNebulaVersion is oned's version, e.g. "6.6.0".
	OpenNebulaVersion string `xml:"opennebula_version"`
	// STime is the VM's creation time (Unix seconds).
	STime int64 `xml:"stime"`
	// DeploymentTime is when oned generated this deployment file (Unix
	// seconds, `time(0)`): it identifies one deploy of the VM; a later
	// deploy (resume, recover, reschedule) carries a later value. 0 when
	// absent (older OpenNebula).
	DeploymentTime int64 `xml:"deployment_time"`
}

// Parse reads a libvirt domain XML document. It fails with a one-line error
// when the document is not a domain or an RBD disk cannot be understood; it
// never panics.
func Parse(xmlDoc []byte) (*Domain, error) {
	if len(strings.TrimSpace(string(xmlDoc))) == 0 {
		return nil, errors.New("domain XML: empty document")
	}
	dom, err := unmarshal(xmlDoc)
	if err != nil {
		return nil, fmt.Errorf("domain XML: %s", oneLine(err.Error()))
	}
	d := &Domain{
		Name: dom.Name,
		UUID: dom.UUID,
		VMID: VMIDFromName(dom.Name),
	}
	if d.Name == "" {
		return nil, errors.New("domain XML: no <name>")
	}
	if dom.Devices != nil {
		for i := range dom.Devices.Disks {
			disk, ok, err := rbdDisk(&dom.Devices.Disks[i])
			if err != nil {
				return nil, fmt.Errorf("domain XML %s: %w", d.Name, err)
			}
			if ok {
				d.Disks = append(d.Disks, disk)
			}
		}
	}
	if dom.Metadata != nil {
		meta, err := openNebulaMeta(xmlDoc)
		if err != nil {
			return nil, fmt.Errorf("domain XML %s: OpenNebula metadata: %s", d.Name, oneLine(err.Error()))
		}
		d.OpenNebula = meta
	}
	return d, nil
}

// unmarshal runs libvirtxml and turns a panic in one of its custom
// unmarshalers into an error: a hook must fail with a message, not crash.
func unmarshal(xmlDoc []byte) (dom *libvirtxml.Domain, err error) {
	defer func() {
		if r := recover(); r != nil {
			dom, err = nil, fmt.Errorf("cannot parse: %v", r)
		}
	}()
	dom = &libvirtxml.Domain{}
	if err := dom.Unmarshal(string(xmlDoc)); err != nil {
		return nil, err
	}
	return dom, nil
}

// Instance is the identity of the deployment file the domain was defined
// from: its `<one:deployment_time>` (see OpenNebulaMeta.DeploymentTime), 0
// when the XML has no OpenNebula metadata or no positive value. A live
// migration and a restore keep it; every new deploy changes it.
func (d *Domain) Instance() int64 {
	if d == nil || d.OpenNebula == nil || d.OpenNebula.DeploymentTime < 0 {
		return 0
	}
	return d.OpenNebula.DeploymentTime
}

// Stime is the VM's identity with its id: its `<one:stime>`, when oned
// created it (see OpenNebulaMeta.STime; engine.Claim.Stime), 0 when the XML
// has no OpenNebula metadata or no positive value. It never changes for a
// VM.
func (d *Domain) Stime() int64 {
	if d == nil || d.OpenNebula == nil || d.OpenNebula.STime < 0 {
		return 0
	}
	return d.OpenNebula.STime
}

// VMIDFromName returns N for a domain name "one-<N>" (N in canonical
// decimal form), -1 otherwise.
func VMIDFromName(name string) int {
	s, ok := strings.CutPrefix(name, "one-")
	if !ok || s == "" {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return -1
	}
	return n
}

// rbdDisk converts one libvirt disk. ok is false for disks that are not
// network disks with protocol rbd.
func rbdDisk(ld *libvirtxml.DomainDisk) (d vmdisk.Disk, ok bool, err error) {
	if ld.Source == nil || ld.Source.Network == nil ||
		!strings.EqualFold(ld.Source.Network.Protocol, "rbd") {
		return d, false, nil
	}
	src := ld.Source.Network
	if ld.Target != nil {
		d.ID = ld.Target.Dev
	}
	what := "rbd disk"
	if d.ID != "" {
		what = "rbd disk " + d.ID
	}
	if src.Name == "" {
		return d, false, fmt.Errorf("%s: <source protocol='rbd'> has no name", what)
	}
	d.Pool, d.Namespace, d.Name, err = vmdisk.ParseImage(src.Name)
	if err != nil {
		return d, false, fmt.Errorf("%s: %w", what, err)
	}
	for _, h := range src.Hosts {
		mon, err := monitor(h)
		if err != nil {
			return d, false, fmt.Errorf("%s: %w", what, err)
		}
		d.Monitors = append(d.Monitors, mon)
	}
	// libvirt writes <auth> inside <source> since 3.9; older XML has it as
	// a child of <disk>. Both mean the same.
	switch {
	case src.Auth != nil:
		d.User = src.Auth.Username
	case ld.Auth != nil:
		d.User = ld.Auth.Username
	}
	d.User = strings.TrimPrefix(d.User, "client.")
	if src.Config != nil {
		d.Conf = src.Config.File
	}
	d.Shareable = ld.Shareable != nil
	d.ReadOnly = ld.ReadOnly != nil
	return d, true, nil
}

// monitor renders a `<host name port>` as "host:port" ("[v6addr]:port").
func monitor(h libvirtxml.DomainDiskSourceHost) (string, error) {
	if h.Socket != "" || (h.Transport != "" && h.Transport != "tcp") {
		return "", fmt.Errorf("monitor host %q: transport %q is not supported for rbd", h.Name, h.Transport)
	}
	name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "["), "]")
	if name == "" {
		return "", errors.New("<host> without name")
	}
	port := h.Port
	if port == "" {
		port = defaultCephPort
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("monitor host %q: bad port %q", h.Name, h.Port)
	}
	if strings.ContainsAny(name, "[]/ \t") {
		return "", fmt.Errorf("monitor host %q: bad name", h.Name)
	}
	return net.JoinHostPort(name, port), nil
}

// openNebulaMeta decodes the document a second time with only the metadata
// in view, so that a namespace prefix declared anywhere resolves.
func openNebulaMeta(xmlDoc []byte) (*OpenNebulaMeta, error) {
	var doc struct {
		Metadata struct {
			VM []OpenNebulaMeta `xml:"http://opennebula.org/xmlns/libvirt/1.0 vm"` // openNebulaNS
		} `xml:"metadata"`
	}
	if err := xml.Unmarshal(xmlDoc, &doc); err != nil {
		return nil, err
	}
	switch len(doc.Metadata.VM) {
	case 0:
		return nil, nil
	case 1:
		m := doc.Metadata.VM[0]
		return &m, nil
	}
	return nil, fmt.Errorf("%d <one:vm> blocks, want one", len(doc.Metadata.VM))
}

// oneLine keeps an error on one line (encoding/xml errors may quote input).
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
