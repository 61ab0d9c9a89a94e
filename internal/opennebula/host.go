package opennebula

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Host states (include/Host.h HostState, release-7.4.0 lines 49-60; the
// values 1, 5, 6, 7 are the MONITORING_* states of older releases,
// share/doc/xsd/host.xsd lines 9-19).
const (
	HostInit               = 0
	HostMonitoringMonitor  = 1
	HostMonitored          = 2
	HostError              = 3
	HostDisabled           = 4
	HostMonitoringError    = 5
	HostMonitoringInit     = 6
	HostMonitoringDisabled = 7
	HostOffline            = 8
)

// HostStateName returns the name oned gives a host state ("ERROR"...).
func HostStateName(s int) string {
	names := []string{"INIT", "MONITORING_MONITORED", "MONITORED", "ERROR", "DISABLED",
		"MONITORING_ERROR", "MONITORING_INIT", "MONITORING_DISABLED", "OFFLINE"}
	if s >= 0 && s < len(names) {
		return names[s]
	}
	return "STATE_" + strconv.Itoa(s)
}

// HostInfo is what rbdfence needs to know about an OpenNebula host.
type HostInfo struct {
	ID    int
	Name  string
	State int
	// LastMonitored is /HOST/MONITORING/TIMESTAMP: when oned last received
	// the host's monitoring (HostMonitoringTemplate::to_xml,
	// src/host/HostMonitoringTemplate.cc:260-283 in release-7.4.0); zero
	// when the host was never monitored (an empty <MONITORING/>).
	LastMonitored time.Time
	// VMs are the ids of /HOST/VMS: the VMs oned places on the host.
	VMs []int
	// Addresses is /HOST/TEMPLATE/RBDFENCE_HOST_ADDRESSES as the operator
	// set it ("" when absent): the addresses Ceph sees for the host's
	// clients (HostAddresses parses it).
	Addresses string
}

// AttrHostAddresses is the host template attribute that names the
// addresses Ceph sees for the host's clients, blank or comma separated:
// fence-host's scope for a host whose name does not resolve to them. An
// operator sets it once: onehost update HOST --append with
// RBDFENCE_HOST_ADDRESSES="10.0.1.5 fd00::5".
const AttrHostAddresses = "RBDFENCE_HOST_ADDRESSES"

// HostAddresses parses h.Addresses: none when the attribute is absent or
// empty, an error naming the attribute and the host when a word is not an
// IP address.
func (h *HostInfo) HostAddresses() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, w := range strings.FieldsFunc(h.Addresses, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		ip, err := netip.ParseAddr(w)
		if err != nil || ip.IsUnspecified() {
			return nil, fmt.Errorf("host %s: %s %q: %q is not an IP address (fix it with: onehost update %s --append)", h.Name, AttrHostAddresses, clip(h.Addresses), clip(w), h.Name)
		}
		if ip = ip.Unmap(); !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out, nil
}

// ParseHost reads a <HOST> document as one.host.info returns it
// (Host::to_xml, src/host/Host.cc:401-429 in release-7.4.0).
func ParseHost(xmlDoc []byte) (*HostInfo, error) {
	n, err := parseXMLTree(xmlDoc, "HOST")
	if err != nil {
		return nil, err
	}
	return hostFromNode(n)
}

func hostFromNode(n *xnode) (*HostInfo, error) {
	id, err := intChild(n, "ID", true)
	if err != nil {
		return nil, err
	}
	if id < 0 {
		return nil, fmt.Errorf("HOST ID %d is negative", id)
	}
	h := &HostInfo{ID: id}
	if nm := n.child("NAME"); nm != nil {
		h.Name = strings.TrimSpace(nm.text)
	}
	if h.Name == "" {
		return nil, fmt.Errorf("host %d: no NAME", id)
	}
	if h.State, err = intChild(n, "STATE", true); err != nil {
		return nil, fmt.Errorf("host %d: %w", id, err)
	}
	if m := n.child("MONITORING"); m != nil {
		ts, err := intChild(m, "TIMESTAMP", false)
		if err != nil {
			return nil, fmt.Errorf("host %d: MONITORING/%w", id, err)
		}
		if ts > 0 {
			h.LastMonitored = time.Unix(int64(ts), 0).UTC()
		}
	}
	if t := n.child("TEMPLATE"); t != nil {
		if a := t.child(AttrHostAddresses); a != nil {
			h.Addresses = strings.TrimSpace(a.text)
		}
	}
	if vms := n.child("VMS"); vms != nil {
		for _, c := range vms.children("ID") {
			v, err := strconv.Atoi(strings.TrimSpace(c.text))
			if err != nil {
				return nil, fmt.Errorf("host %d: VMS/ID %q is not an integer", id, clip(c.text))
			}
			h.VMs = append(h.VMs, v)
		}
	}
	return h, nil
}

// Host returns the host with the given id, read with one.host.info.
//
// Similar To: onehost show -x ID
func (c *Client) Host(ctx context.Context, id int) (*HostInfo, error) {
	body, err := c.callString(ctx, "one.host.info", id, false)
	if err != nil {
		return nil, err
	}
	h, err := ParseHost([]byte(body))
	if err != nil {
		return nil, &Error{Method: "one.host.info", Err: err, kind: ErrProtocol}
	}
	return h, nil
}

// HostByName finds a host by its NAME (or its id given as a number) in
// one.hostpool.info, then reads it with one.host.info.
//
// Similar To: onehost show NAME
func (c *Client) HostByName(ctx context.Context, name string) (*HostInfo, error) {
	if id, err := strconv.Atoi(name); err == nil && id >= 0 {
		return c.Host(ctx, id)
	}
	body, err := c.callString(ctx, "one.hostpool.info")
	if err != nil {
		return nil, err
	}
	pool, err := parseXMLTree([]byte(body), "HOST_POOL")
	if err != nil {
		return nil, &Error{Method: "one.hostpool.info", Err: err, kind: ErrProtocol}
	}
	for _, n := range pool.children("HOST") {
		h, err := hostFromNode(n)
		if err != nil {
			return nil, &Error{Method: "one.hostpool.info", Err: err, kind: ErrProtocol}
		}
		if h.Name == name {
			return c.Host(ctx, h.ID)
		}
	}
	return nil, &Error{Method: "one.hostpool.info", Err: fmt.Errorf("no host named %q (see: onehost list)", name), kind: ErrNotFound}
}

// VMsOnHost returns every VM that is not DONE whose current placement (last
// HISTORY record) is the host named host, through one.vmpool.infoextended:
// the same selection as OpenNebula's HA hook (share/hooks/ft/host_error.rb
// line 254 in release-7.4.0, HISTORY[HOSTNAME=host and last()]).
func (c *Client) VMsOnHost(ctx context.Context, host string) ([]*VMInfo, error) {
	all, err := c.VMs(ctx)
	if err != nil {
		return nil, err
	}
	var out []*VMInfo
	for _, vm := range all {
		if vm.Host == host {
			out = append(out, vm)
		}
	}
	return out, nil
}

// UpdateHostTemplate merges tpl (OpenNebula template syntax) into the
// host's template with one.host.update in merge mode.
//
// Similar To: onehost update --append ID FILE
func (c *Client) UpdateHostTemplate(ctx context.Context, id int, tpl string) error {
	_, err := c.call(ctx, "one.host.update", id, tpl, updateMerge)
	return err
}

// HostFenceEvent renders a host fence summary for UpdateHostTemplate: the
// attribute RBDFENCE_HOST_FENCE (vector, the last fence) and
// RBDFENCE_LAST_HOST_FENCE (one line).
func HostFenceEvent(fields map[string]string, order []string, summary string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "RBDFENCE_LAST_HOST_FENCE = %s\n", tplQuote(summary))
	b.WriteString("RBDFENCE_HOST_FENCE = [\n")
	for i, k := range order {
		sep := ",\n"
		if i == len(order)-1 {
			sep = " ]\n"
		}
		fmt.Fprintf(&b, "  %s = %s%s", k, tplQuote(fields[k]), sep)
	}
	return b.String()
}

// IsNotFound reports whether err says the object does not exist in oned.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
