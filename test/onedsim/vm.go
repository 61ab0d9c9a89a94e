package onedsim

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// VM states used by the builder (VirtualMachine::VmState / LcmState).
const (
	StatePending  = 1
	StateActive   = 3
	StatePoweroff = 8
	StateDone     = 6
	LCMInit       = 0
	LCMBoot       = 2
	LCMRunning    = 3
	LCMMigrate    = 4
)

// VM describes a VM for XML(), which renders it as one.vm.info returns it
// (OpenNebula 6.x: compact XML, template values in CDATA sections,
// attributes sorted by name, vector values sorted by name).
type VM struct {
	ID   int
	Name string // default "vm-<ID>"
	// UID/GID/UName/GName default to 0/0/oneadmin/oneadmin.
	UID, GID     int
	UName, GName string
	// State and LCMState default to ACTIVE (3) / RUNNING (3) when both are 0.
	State, LCMState int
	DeployID        string // default "one-<ID>"
	STime           int64  // default DefaultSTime

	// Host, HostID and Seq describe the last HISTORY record; with Host ""
	// and no History the VM has none (never deployed).
	Host   string
	HostID int
	Seq    int
	// History, when set, replaces the record above (all are rendered).
	History []History

	// SystemDSID is the system datastore (HISTORY/DS_ID, default 0) and
	// TMMadSystem its TM_MAD (TEMPLATE/TM_MAD_SYSTEM, default "ceph" once
	// the VM has a HISTORY record, none before: oned sets it at deploy).
	SystemDSID  int
	TMMadSystem string

	Disks        []Disk
	UserTemplate Template
}

// History is one HISTORY record.
type History struct {
	Seq    int
	Host   string
	HostID int
	DSID   int
	TMMad  string // default the VM's TMMadSystem
	VMMad  string // default "kvm"
	STime  int64
	ETime  int64
	Action int
}

// Disk is one DISK of a VM, rendered with the attributes oned writes for a
// Ceph image datastore (LN_TARGET NONE, CLONE_TARGET SELF, CEPH_* and
// POOL_NAME inherited from the datastore).
type Disk struct {
	ID      int
	ImageID int    // IMAGE_ID
	Image   string // IMAGE name, default "image-<ImageID>"
	// Source is SOURCE, default "<Pool>/one-<ImageID>"; volatile disks have
	// none.
	Source   string
	Volatile bool   // a volatile (TYPE fs) disk on a Ceph system datastore
	Type     string // TYPE, default "RBD" ("fs" when Volatile)
	DiskType string // DISK_TYPE, default "RBD"
	// Persistent images are opened as is (CLONE=NO); others are clones.
	Persistent bool
	Shareable  bool // SHAREABLE=YES (persistent shareable raw image)
	ReadOnly   bool
	Pool       string // POOL_NAME, default "one"
	CephHost   string // CEPH_HOST, default "" (not written)
	CephUser   string // CEPH_USER, default "libvirt"
	CephSecret string // CEPH_SECRET, default a fixed UUID
	CephKey    string // CEPH_KEY, written when set
	CephConf   string // CEPH_CONF, written when set
	// DatastoreID/Datastore default to 100/"ceph-images" (the VM's system
	// datastore and "ceph-system" for volatile disks).
	DatastoreID int
	Datastore   string
	TMMad       string // TM_MAD, default "ceph"
	// TMMadSystem is the disk's TM_MAD_SYSTEM, default the VM's.
	TMMadSystem string
	Target      string // TARGET, default vd<a+ID>
	Size        int    // SIZE in MB, default 2252
	// Extra attributes are added last; an empty value removes one.
	Extra map[string]string
}

const defaultSecret = "8271ce8a-385d-44d7-a228-c42de4259c5e"

// XML renders the VM document.
// DefaultSTime is a VM's STIME when VM.STime is 0.
const DefaultSTime = 1714550000

func (v VM) XML() string {
	name := v.Name
	if name == "" {
		name = fmt.Sprintf("vm-%d", v.ID)
	}
	uname, gname := v.UName, v.GName
	if uname == "" {
		uname = "oneadmin"
	}
	if gname == "" {
		gname = "oneadmin"
	}
	state, lcm := v.State, v.LCMState
	if state == 0 && lcm == 0 {
		state, lcm = StateActive, LCMRunning
	}
	deployID := v.DeployID
	if deployID == "" && state == StateActive {
		deployID = fmt.Sprintf("one-%d", v.ID)
	}
	stime := v.STime
	if stime == 0 {
		stime = DefaultSTime
	}
	// oned writes TM_MAD_SYSTEM at the first deploy, from the system
	// datastore (VirtualMachine::check_tm_mad_disks,
	// src/vm/VirtualMachine.cc:4238-4256 in 7.4.0): a VM never deployed has
	// none unless it is set.
	tms := v.TMMadSystem
	if tms == "" && (v.Host != "" || len(v.History) > 0) {
		tms = "ceph"
	}

	var b strings.Builder
	b.WriteString("<VM>")
	el(&b, "ID", strconv.Itoa(v.ID))
	el(&b, "UID", strconv.Itoa(v.UID))
	el(&b, "GID", strconv.Itoa(v.GID))
	el(&b, "UNAME", uname)
	el(&b, "GNAME", gname)
	el(&b, "NAME", name)
	b.WriteString("<PERMISSIONS><OWNER_U>1</OWNER_U><OWNER_M>1</OWNER_M><OWNER_A>0</OWNER_A>" +
		"<GROUP_U>0</GROUP_U><GROUP_M>0</GROUP_M><GROUP_A>0</GROUP_A>" +
		"<OTHER_U>0</OTHER_U><OTHER_M>0</OTHER_M><OTHER_A>0</OTHER_A></PERMISSIONS>")
	el(&b, "LAST_POLL", "0")
	el(&b, "STATE", strconv.Itoa(state))
	el(&b, "LCM_STATE", strconv.Itoa(lcm))
	el(&b, "PREV_STATE", strconv.Itoa(state))
	el(&b, "PREV_LCM_STATE", strconv.Itoa(lcm))
	el(&b, "RESCHED", "0")
	el(&b, "STIME", strconv.FormatInt(stime, 10))
	el(&b, "ETIME", "0")
	el(&b, "DEPLOY_ID", deployID)
	b.WriteString("<MONITORING></MONITORING>")

	var t Template
	t.add(Attribute{Name: "AUTOMATIC_DS_REQUIREMENTS", Value: `("CLUSTERS/ID" @> 0)`})
	t.add(Attribute{Name: "AUTOMATIC_NIC_REQUIREMENTS", Value: `("CLUSTERS/ID" @> 0)`})
	t.add(Attribute{Name: "AUTOMATIC_REQUIREMENTS", Value: `(CLUSTER_ID = 0) & !(PUBLIC_CLOUD = YES) & !(PIN_POLICY = PINNED)`})
	t.add(Attribute{Name: "CONTEXT", Vector: map[string]string{
		"DISK_ID": strconv.Itoa(len(v.Disks)), "ETH0_IP": fmt.Sprintf("10.0.1.%d", 10+v.ID%200),
		"ETH0_MAC": fmt.Sprintf("02:00:0a:00:01:%02x", (10+v.ID)%256), "NETWORK": "YES", "TARGET": "hda",
	}})
	t.add(Attribute{Name: "CPU", Value: "1"})
	for _, d := range v.Disks {
		t.add(Attribute{Name: "DISK", Vector: d.attrs(tms, v.SystemDSID)})
	}
	t.add(Attribute{Name: "GRAPHICS", Vector: map[string]string{"LISTEN": "0.0.0.0", "PORT": strconv.Itoa(5900 + v.ID), "TYPE": "VNC"}})
	t.add(Attribute{Name: "MEMORY", Value: "1024"})
	t.add(Attribute{Name: "NIC", Vector: map[string]string{
		"BRIDGE": "br0", "IP": fmt.Sprintf("10.0.1.%d", 10+v.ID%200), "MAC": fmt.Sprintf("02:00:0a:00:01:%02x", (10+v.ID)%256),
		"NETWORK": "private", "NETWORK_ID": "0", "NIC_ID": "0", "VN_MAD": "bridge",
	}})
	t.add(Attribute{Name: "OS", Vector: map[string]string{"ARCH": "x86_64"}})
	t.add(Attribute{Name: "TEMPLATE_ID", Value: "0"})
	if tms != "" {
		t.add(Attribute{Name: "TM_MAD_SYSTEM", Value: tms})
	}
	t.add(Attribute{Name: "VMID", Value: strconv.Itoa(v.ID)})
	b.WriteString(t.XML("TEMPLATE"))
	b.WriteString(v.UserTemplate.XML("USER_TEMPLATE"))

	hist := v.History
	if hist == nil && v.Host != "" {
		hist = []History{{Seq: v.Seq, Host: v.Host, HostID: v.HostID, DSID: v.SystemDSID}}
	}
	if len(hist) == 0 {
		b.WriteString("<HISTORY_RECORDS></HISTORY_RECORDS>")
	} else {
		b.WriteString("<HISTORY_RECORDS>")
		for _, h := range hist {
			h.write(&b, v.ID, v.UID, v.GID, tms, stime)
		}
		b.WriteString("</HISTORY_RECORDS>")
	}
	b.WriteString("</VM>")
	return b.String()
}

func (h History) write(b *strings.Builder, oid, uid, gid int, tms string, stime int64) {
	if h.TMMad == "" {
		h.TMMad = tms
	}
	if h.VMMad == "" {
		h.VMMad = "kvm"
	}
	if h.STime == 0 {
		h.STime = stime + int64(h.Seq)*60
	}
	b.WriteString("<HISTORY>")
	el(b, "OID", strconv.Itoa(oid))
	el(b, "SEQ", strconv.Itoa(h.Seq))
	el(b, "HOSTNAME", h.Host)
	el(b, "HID", strconv.Itoa(h.HostID))
	el(b, "CID", "0")
	el(b, "STIME", strconv.FormatInt(h.STime, 10))
	el(b, "ETIME", strconv.FormatInt(h.ETime, 10))
	el(b, "VM_MAD", h.VMMad)
	el(b, "TM_MAD", h.TMMad)
	el(b, "DS_ID", strconv.Itoa(h.DSID))
	el(b, "PSTIME", strconv.FormatInt(h.STime, 10))
	el(b, "PETIME", strconv.FormatInt(h.STime+1, 10))
	el(b, "RSTIME", strconv.FormatInt(h.STime+1, 10))
	el(b, "RETIME", strconv.FormatInt(h.ETime, 10))
	el(b, "ESTIME", "0")
	el(b, "EETIME", "0")
	el(b, "ACTION", strconv.Itoa(h.Action))
	el(b, "UID", strconv.Itoa(uid))
	el(b, "GID", strconv.Itoa(gid))
	el(b, "REQUEST_ID", "-1")
	b.WriteString("</HISTORY>")
}

// attrs returns the DISK vector as oned writes it.
func (d Disk) attrs(vmTMMadSystem string, systemDS int) map[string]string {
	pool := d.Pool
	if pool == "" {
		pool = "one"
	}
	user := d.CephUser
	if user == "" {
		user = "libvirt"
	}
	secret := d.CephSecret
	if secret == "" {
		secret = defaultSecret
	}
	tmMad := d.TMMad
	if tmMad == "" {
		tmMad = "ceph"
	}
	tms := d.TMMadSystem
	if tms == "" {
		tms = vmTMMadSystem
	}
	target := d.Target
	if target == "" {
		target = "vd" + string(rune('a'+d.ID%26))
	}
	size := d.Size
	if size == 0 {
		size = 2252
	}
	a := map[string]string{
		"CEPH_SECRET":              secret,
		"CEPH_USER":                user,
		"CLUSTER_ID":               "0",
		"DEV_PREFIX":               "vd",
		"DISK_ID":                  strconv.Itoa(d.ID),
		"DISK_SNAPSHOT_TOTAL_SIZE": "0",
		"DRIVER":                   "raw",
		"FORMAT":                   "raw",
		"POOL_NAME":                pool,
		"SIZE":                     strconv.Itoa(size),
		"TARGET":                   target,
		"TM_MAD":                   tmMad,
	}
	if tms != "" {
		a["TM_MAD_SYSTEM"] = tms
	}
	if d.CephHost != "" {
		a["CEPH_HOST"] = d.CephHost
	}
	if d.CephKey != "" {
		a["CEPH_KEY"] = d.CephKey
	}
	if d.CephConf != "" {
		a["CEPH_CONF"] = d.CephConf
	}
	dsID, ds := d.DatastoreID, d.Datastore
	if d.Volatile {
		if dsID == 0 {
			dsID = systemDS
		}
		if ds == "" {
			ds = "ceph-system"
		}
		a["TYPE"] = "fs"
		a["DISK_TYPE"] = "RBD"
	} else {
		if dsID == 0 {
			dsID = 100
		}
		if ds == "" {
			ds = "ceph-images"
		}
		image := d.Image
		if image == "" {
			image = fmt.Sprintf("image-%d", d.ImageID)
		}
		source := d.Source
		if source == "" {
			source = fmt.Sprintf("%s/one-%d", pool, d.ImageID)
		}
		a["ALLOW_ORPHANS"] = "mixed"
		a["CLONE_TARGET"] = "SELF"
		a["LN_TARGET"] = "NONE"
		a["IMAGE"] = image
		a["IMAGE_ID"] = strconv.Itoa(d.ImageID)
		a["IMAGE_STATE"] = "2"
		a["IMAGE_UNAME"] = "oneadmin"
		a["ORIGINAL_SIZE"] = strconv.Itoa(size)
		a["SOURCE"] = source
		a["TYPE"] = "RBD"
		a["DISK_TYPE"] = "RBD"
		a["READONLY"] = yesNo(d.ReadOnly)
		if d.Persistent || d.Shareable {
			a["PERSISTENT"] = "YES"
			a["CLONE"] = "NO"
			a["SAVE"] = "YES"
		} else {
			a["CLONE"] = "YES"
			a["SAVE"] = "NO"
		}
		if d.Shareable {
			a["SHAREABLE"] = "YES"
		}
	}
	if d.ReadOnly {
		a["READONLY"] = "YES"
	}
	a["DATASTORE"] = ds
	a["DATASTORE_ID"] = strconv.Itoa(dsID)
	if d.Type != "" {
		a["TYPE"] = d.Type
	}
	if d.DiskType != "" {
		a["DISK_TYPE"] = d.DiskType
	}
	for k, v := range d.Extra {
		if v == "" {
			delete(a, k)
		} else {
			a[k] = v
		}
	}
	return a
}

func yesNo(b bool) string {
	if b {
		return "YES"
	}
	return "NO"
}

func el(b *strings.Builder, name, text string) {
	b.WriteString("<" + name + ">")
	b.WriteString(escapeRPC(text))
	b.WriteString("</" + name + ">")
}

// vmRec is a stored VM: its document and its user template (authoritative;
// rendered in place of the document's USER_TEMPLATE).
type vmRec struct {
	id   int
	root *node
	user Template
}

func newVMRec(root *node) (*vmRec, error) {
	if root.Name != "VM" {
		return nil, fmt.Errorf("root element <%s>, want <VM>", root.Name)
	}
	id, err := strconv.Atoi(strings.TrimSpace(root.text("ID")))
	if err != nil || id < 0 {
		return nil, fmt.Errorf("VM ID %q is not a non-negative integer", root.text("ID"))
	}
	for _, f := range []string{"STATE", "LCM_STATE"} {
		if _, err := strconv.Atoi(strings.TrimSpace(root.text(f))); err != nil {
			return nil, fmt.Errorf("VM %d: %s %q is not an integer", id, f, root.text(f))
		}
	}
	if root.child("TEMPLATE") == nil {
		return nil, fmt.Errorf("VM %d: no TEMPLATE", id)
	}
	return &vmRec{id: id, root: root, user: templateFromNode(root.child("USER_TEMPLATE"))}, nil
}

// templateFromNode is Template::from_xml_node on a stored document.
func templateFromNode(n *node) Template {
	var t Template
	if n == nil {
		return t
	}
	for _, k := range n.Kids {
		if len(k.Kids) == 0 {
			if k.Text != "" {
				t.add(Attribute{Name: k.Name, Value: k.Text})
			}
			continue
		}
		vec := map[string]string{}
		for _, g := range k.Kids {
			if len(g.Kids) == 0 && g.Text != "" {
				if _, dup := vec[g.Name]; !dup {
					vec[g.Name] = g.Text
				}
			}
		}
		t.add(Attribute{Name: k.Name, Vector: vec})
	}
	return t
}

func (v *vmRec) intField(name string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(v.root.text(name)))
	return n
}

// history returns the HISTORY records; last is the one with the highest SEQ.
func (v *vmRec) history() (all []*node, last *node) {
	hr := v.root.child("HISTORY_RECORDS")
	if hr == nil {
		return nil, nil
	}
	best := -1
	for _, h := range hr.Kids {
		if h.Name != "HISTORY" {
			continue
		}
		all = append(all, h)
		if s, err := strconv.Atoi(strings.TrimSpace(h.text("SEQ"))); err == nil && s >= best {
			best, last = s, h
		}
	}
	return all, last
}

// full renders the document as one.vm.info (allHistory) or
// one.vmpool.infoextended (last HISTORY only) return it.
func (v *vmRec) full(allHistory bool) string {
	var b strings.Builder
	b.WriteString("<VM>")
	wroteUser := false
	for _, k := range v.root.Kids {
		switch k.Name {
		case "USER_TEMPLATE":
			b.WriteString(v.user.XML("USER_TEMPLATE"))
			wroteUser = true
		case "HISTORY_RECORDS":
			if !wroteUser {
				b.WriteString(v.user.XML("USER_TEMPLATE"))
				wroteUser = true
			}
			all, last := v.history()
			if !allHistory && last != nil {
				all = []*node{last}
			}
			if len(all) == 0 {
				b.WriteString("<HISTORY_RECORDS/>")
				continue
			}
			b.WriteString("<HISTORY_RECORDS>")
			for _, h := range all {
				writeNode(&b, h, false)
			}
			b.WriteString("</HISTORY_RECORDS>")
		default:
			writeNode(&b, k, false)
		}
	}
	if !wroteUser {
		b.WriteString(v.user.XML("USER_TEMPLATE"))
	}
	b.WriteString("</VM>")
	return b.String()
}

// shortUserAttrs are the user template attributes one.vmpool.info keeps.
var shortUserAttrs = map[string]bool{
	"LABELS": true, "ERROR": true, "SCHED_MESSAGE": true, "SCHED_RANK": true,
	"SCHED_DS_RANK": true, "SCHED_REQUIREMENTS": true, "SCHED_DS_REQUIREMENTS": true,
	"SCHED_ACTION": true, "PUBLIC_CLOUD": true, "RANK": true,
}

// short renders the document as one.vmpool.info does
// (VirtualMachine::to_xml_short): short DISKs without SOURCE or CEPH_*,
// a reduced user template and only the last HISTORY, shortened.
func (v *vmRec) short() string {
	var b strings.Builder
	r := v.root
	b.WriteString("<VM>")
	for _, f := range []string{"ID", "UID", "GID", "UNAME", "GNAME", "NAME", "LAST_POLL", "STATE", "LCM_STATE", "RESCHED", "STIME", "ETIME", "DEPLOY_ID"} {
		el(&b, f, r.text(f))
	}
	tmpl := templateFromNode(r.child("TEMPLATE"))
	cpu, _ := tmpl.Single("CPU")
	mem, _ := tmpl.Single("MEMORY")
	b.WriteString("<TEMPLATE>")
	el(&b, "CPU", cpu)
	el(&b, "MEMORY", mem)
	for _, d := range tmpl.Get("DISK") {
		b.WriteString("<DISK>")
		for _, k := range []string{"DISK_ID", "DATASTORE", "DATASTORE_ID", "IMAGE", "IMAGE_ID", "SIZE", "TYPE", "CLONE", "CLONE_TARGET", "LN_TARGET", "DISK_SNAPSHOT_TOTAL_SIZE"} {
			el(&b, k, d.Vector[k])
		}
		b.WriteString("</DISK>")
	}
	for _, n := range tmpl.Get("NIC") {
		b.WriteString("<NIC>")
		for _, k := range []string{"IP", "MAC", "NETWORK", "NETWORK_ID", "NIC_ID", "SECURITY_GROUPS"} {
			if val, ok := n.Vector[k]; ok {
				b.WriteString("<" + k + ">" + cdata(val) + "</" + k + ">")
			}
		}
		b.WriteString("</NIC>")
	}
	if g := tmpl.Get("GRAPHICS"); len(g) > 0 {
		writeAttr(&b, g[0])
	}
	b.WriteString("</TEMPLATE>")
	b.WriteString("<MONITORING></MONITORING>")
	var ut Template
	for _, a := range v.user {
		if shortUserAttrs[a.Name] {
			ut = append(ut, a)
		}
	}
	b.WriteString(ut.XML("USER_TEMPLATE"))
	if _, last := v.history(); last != nil {
		b.WriteString("<HISTORY_RECORDS><HISTORY>")
		for _, f := range []string{"OID", "SEQ", "HOSTNAME", "HID", "CID", "DS_ID", "VM_MAD", "TM_MAD", "ACTION"} {
			el(&b, f, last.text(f))
		}
		b.WriteString("</HISTORY></HISTORY_RECORDS>")
	} else {
		b.WriteString("<HISTORY_RECORDS/>")
	}
	b.WriteString("</VM>")
	return b.String()
}

// parseVMDocs reads a <VM> document or a <VM_POOL> of them.
func parseVMDocs(doc []byte) ([]*vmRec, error) {
	root, err := parseNode(doc)
	if err != nil {
		return nil, err
	}
	var roots []*node
	switch root.Name {
	case "VM":
		roots = []*node{root}
	case "VM_POOL":
		for _, k := range root.Kids {
			if k.Name == "VM" {
				roots = append(roots, k)
			}
		}
	default:
		return nil, fmt.Errorf("root element <%s>, want <VM> or <VM_POOL>", root.Name)
	}
	var recs []*vmRec
	for _, r := range roots {
		rec, err := newVMRec(r)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	if len(recs) == 0 {
		return nil, errors.New("no VM in document")
	}
	return recs, nil
}

func sortedIDs(m map[int]*vmRec) []int {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}
