package onedsim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Host states (include/Host.h HostState, release-7.4.0 lines 49-60).
const (
	HostInit      = 0
	HostMonitored = 2
	HostError     = 3
	HostDisabled  = 4
	HostOffline   = 8
)

// Host describes an OpenNebula host, rendered as one.host.info returns it
// (Host::to_xml, src/host/Host.cc:401-429 in release-7.4.0, and
// share/doc/xsd/host.xsd): ID, NAME, STATE, PREV_STATE, IM_MAD, VM_MAD,
// CLUSTER_ID, CLUSTER, HOST_SHARE, VMS (the VMs whose last HISTORY record
// names the host, as oned's vm_collection), TEMPLATE and MONITORING
// (HostMonitoringTemplate::to_xml, src/host/HostMonitoringTemplate.cc:260-283:
// <MONITORING/> when never monitored, else TIMESTAMP and ID first).
type Host struct {
	ID    int
	Name  string
	State int // default 0 (INIT)
	// LastMonitored is MONITORING/TIMESTAMP; zero renders <MONITORING/>.
	LastMonitored time.Time
	Template      Template
}

type hostRec struct {
	h    Host
	prev int
}

// PutHost stores (or replaces) a host.
func (s *Sim) PutHost(h Host) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts == nil {
		s.hosts = map[int]*hostRec{}
	}
	prev := h.State
	if old, ok := s.hosts[h.ID]; ok {
		prev = old.h.State
		if h.Template == nil {
			h.Template = old.h.Template
		}
	}
	s.hosts[h.ID] = &hostRec{h: h, prev: prev}
}

// HostTemplate returns a copy of host id's template.
func (s *Sim) HostTemplate(id int) (Template, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.hosts[id]
	if !ok {
		return nil, false
	}
	out := make(Template, len(r.h.Template))
	for i, a := range r.h.Template {
		out[i] = a.clone()
	}
	return out, true
}

// hostVMsLocked are the VMs (not DONE) whose last HISTORY names the host.
func (s *Sim) hostVMsLocked(name string) []int {
	var out []int
	for _, id := range sortedIDs(s.vms) {
		v := s.vms[id]
		if v.intField("STATE") == StateDone {
			continue
		}
		if _, last := v.history(); last != nil && strings.TrimSpace(last.text("HOSTNAME")) == name {
			out = append(out, id)
		}
	}
	return out
}

func (s *Sim) hostXMLLocked(r *hostRec) string {
	h := r.h
	var b strings.Builder
	b.WriteString("<HOST>")
	el(&b, "ID", strconv.Itoa(h.ID))
	el(&b, "NAME", h.Name)
	el(&b, "STATE", strconv.Itoa(h.State))
	el(&b, "PREV_STATE", strconv.Itoa(r.prev))
	el(&b, "IM_MAD", "kvm")
	el(&b, "VM_MAD", "kvm")
	el(&b, "CLUSTER_ID", "0")
	el(&b, "CLUSTER", "default")
	vms := s.hostVMsLocked(h.Name)
	fmt.Fprintf(&b, "<HOST_SHARE><MEM_USAGE>0</MEM_USAGE><CPU_USAGE>0</CPU_USAGE><TOTAL_MEM>8388608</TOTAL_MEM><TOTAL_CPU>400</TOTAL_CPU>"+
		"<MAX_MEM>8388608</MAX_MEM><MAX_CPU>400</MAX_CPU><RUNNING_VMS>%d</RUNNING_VMS><VMS_THREAD>1</VMS_THREAD>"+
		"<DATASTORES><DISK_USAGE>0</DISK_USAGE><FREE_DISK>0</FREE_DISK><MAX_DISK>0</MAX_DISK><USED_DISK>0</USED_DISK></DATASTORES>"+
		"<PCI_DEVICES/><NUMA_NODES/></HOST_SHARE>", len(vms))
	b.WriteString("<VMS>")
	for _, id := range vms {
		el(&b, "ID", strconv.Itoa(id))
	}
	b.WriteString("</VMS>")
	b.WriteString(h.Template.XML("TEMPLATE"))
	if h.LastMonitored.IsZero() {
		b.WriteString("<MONITORING/>")
	} else {
		b.WriteString("<MONITORING>")
		el(&b, "TIMESTAMP", strconv.FormatInt(h.LastMonitored.Unix(), 10))
		el(&b, "ID", strconv.Itoa(h.ID))
		b.WriteString("<CAPACITY><FREE_CPU>400</FREE_CPU><FREE_MEMORY>8000000</FREE_MEMORY><USED_CPU>0</USED_CPU><USED_MEMORY>0</USED_MEMORY></CAPACITY>")
		b.WriteString("<SYSTEM><NETRX>0</NETRX><NETTX>0</NETTX></SYSTEM>")
		b.WriteString("</MONITORING>")
	}
	b.WriteString("</HOST>")
	return b.String()
}

// HostXML returns the document one.host.info would return for id.
func (s *Sim) HostXML(id int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.hosts[id]
	if !ok {
		return "", false
	}
	return s.hostXMLLocked(r), true
}

// hostInfo implements one.host.info(session, id[, decrypt]); a missing host
// fails as oned's RequestManagerInfo does: NO_EXISTS "Error getting host [id]."
func (s *Sim) hostInfo(name string, p []any) []byte {
	id := intParam(p, 0, -1)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.hosts[id]
	if !ok {
		return failure(CodeNoExists, fmt.Sprintf("[%s] Error getting host [%d].", name, id), id)
	}
	return encodeResponse(true, s.hostXMLLocked(r), 0)
}

// hostPoolInfo implements one.hostpool.info(session): every host, by id.
func (s *Sim) hostPoolInfo(string, []any) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int, 0, len(s.hosts))
	for id := range s.hosts {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	b.WriteString("<HOST_POOL>")
	for _, id := range ids {
		b.WriteString(s.hostXMLLocked(s.hosts[id]))
	}
	b.WriteString("</HOST_POOL>")
	return encodeResponse(true, b.String(), 0)
}

// hostUpdate implements one.host.update(session, id, template, type): 0
// replaces the template, 1 merges into it (Template::merge, as one.vm.update).
func (s *Sim) hostUpdate(name string, p []any) []byte {
	id := intParam(p, 0, -1)
	tmpl, _ := p[1].(string)
	typ := intParam(p, 2, 0)
	if typ < 0 || typ > 1 {
		return failure(CodeXMLRPCAPI, fmt.Sprintf("[%s] Wrong update type", name), -1)
	}
	nt, err := ParseTemplate(tmpl)
	if err != nil {
		return failure(CodeInternal, fmt.Sprintf("[%s] Cannot update template. %v", name, err), id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.hosts[id]
	if !ok {
		return failure(CodeNoExists, fmt.Sprintf("[%s] Error getting host [%d].", name, id), id)
	}
	if typ == 1 {
		r.h.Template.Merge(nt)
	} else {
		r.h.Template = nt
	}
	return encodeResponse(true, id, 0)
}
