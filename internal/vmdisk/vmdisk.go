// Package vmdisk holds the one description of a VM's RBD disk that the
// OpenNebula and libvirt parsers produce and the fencing mains consume.
package vmdisk

import (
	"fmt"
	"strings"
)

// Disk is one RBD image that QEMU opens for a VM, with the Ceph access
// details the VM's definition gives for it.
type Disk struct {
	// ID names the disk in its source: OpenNebula DISK_ID or libvirt target dev.
	ID string `json:"id"`
	// Pool, Namespace and Name identify the image. Namespace is usually empty.
	Pool      string `json:"pool"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Monitors are "host:port" pairs (port defaults to 6789 when absent in
	// the source). Empty means: use the configured Ceph access.
	Monitors []string `json:"monitors,omitempty"`
	// User is the cephx id without the "client." prefix (e.g. "libvirt").
	User string `json:"user,omitempty"`
	// Keyring and Conf are paths on the host (OpenNebula CEPH_KEY, CEPH_CONF).
	Keyring string `json:"keyring,omitempty"`
	Conf    string `json:"conf,omitempty"`
	// Shareable disks may have several writers and are never fenced.
	Shareable bool `json:"shareable,omitempty"`
	// ReadOnly disks are not written by the VM; foreign writers are reported.
	ReadOnly bool `json:"readonly,omitempty"`
}

// Image returns "pool/name" or "pool/namespace/name".
func (d Disk) Image() string {
	if d.Namespace != "" {
		return d.Pool + "/" + d.Namespace + "/" + d.Name
	}
	return d.Pool + "/" + d.Name
}

// ParseImage splits "pool/name" or "pool/namespace/name".
func ParseImage(s string) (pool, namespace, name string, err error) {
	parts := strings.Split(s, "/")
	for _, p := range parts {
		if p == "" {
			return "", "", "", fmt.Errorf("image %q: want POOL/IMAGE or POOL/NAMESPACE/IMAGE", s)
		}
	}
	switch len(parts) {
	case 2:
		return parts[0], "", parts[1], nil
	case 3:
		return parts[0], parts[1], parts[2], nil
	}
	return "", "", "", fmt.Errorf("image %q: want POOL/IMAGE or POOL/NAMESPACE/IMAGE", s)
}
