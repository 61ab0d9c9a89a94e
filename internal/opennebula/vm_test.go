package opennebula

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var mons42 = []string{"10.0.0.1:6789", "10.0.0.2:6790", "mon3.example.com:6789", "[2001:db8::3]:3300"}

func TestParseVMFixtures(t *testing.T) {
	tests := []struct {
		file string
		want VMInfo
	}{
		{
			file: "vm-42-running.xml",
			want: VMInfo{
				ID: 42, Name: "web-42", State: 3, LCMState: 3,
				Host: "node2", HostID: 2, Seq: 1, SystemDSID: 101, TMMadSystem: "ceph",
				Stime: 1714550000, History: []Placement{{0, "node1", 1714550100}, {1, "node2", 1714551000}},
				Disks: []vmdisk.Disk{
					{ID: "0", Pool: "one", Name: "one-7-42-0", Monitors: mons42, User: "libvirt",
						Keyring: "/etc/ceph/ceph.client.libvirt.keyring", Conf: "/etc/ceph/ceph.conf"},
					{ID: "1", Pool: "one", Name: "one-12", Monitors: mons42, User: "libvirt"},
					{ID: "2", Pool: "one", Name: "one-13", Monitors: []string{"10.0.0.1:6789"}, User: "libvirt", Shareable: true},
					{ID: "3", Pool: "one-sys", Name: "one-sys-42-3", Monitors: []string{"10.0.0.1:6789"}, User: "libvirt"},
					{ID: "4", Pool: "one", Name: "one-20", Monitors: []string{"10.0.0.1:6789"}, User: "libvirt", ReadOnly: true},
				},
			},
		},
		{
			file: "vm-43-ssh.xml",
			want: VMInfo{
				ID: 43, Name: "batch-43", State: 3, LCMState: 3,
				Host: "node3", HostID: 3, Seq: 0, SystemDSID: 0, TMMadSystem: "ssh",
				Stime: 1714550000, History: []Placement{{0, "node3", 1714550100}},
				Skipped: []SkippedDisk{
					{ID: "0", Reason: "TM_MAD_SYSTEM=ssh: QEMU opens a local copy (TYPE=FILE)"},
					{ID: "1", Reason: "TM_MAD_SYSTEM=ssh: QEMU opens a local copy (TYPE=FILE)"},
				},
			},
		},
		{
			file: "vm-44-pending.xml",
			want: VMInfo{
				ID: 44, Name: "pending-44", State: 1, LCMState: 0,
				HostID: -1, Seq: -1, SystemDSID: -1, Stime: 1714550000,
				Disks: []vmdisk.Disk{{ID: "0", Pool: "one", Name: "one-9-44-0", User: "libvirt"}},
			},
		},
		{
			file: "vm-45-pretty.xml",
			want: VMInfo{
				ID: 45, Name: "db & cache", State: 8, LCMState: 0,
				Host: "node4", HostID: 4, Seq: 4, SystemDSID: 0, TMMadSystem: "shared",
				Stime: 1714550000, History: []Placement{{4, "node4", 0}},
				Disks: []vmdisk.Disk{{ID: "0", Pool: "rbd", Namespace: "tenants", Name: "one-31-45-0",
					Monitors: []string{"mon1:6789", "mon2:3300", "[2001:db8::7]:6789"}, User: "oneadmin"}},
				Skipped: []SkippedDisk{
					{ID: "1", Reason: "TYPE=swap DISK_TYPE=FILE: not RBD"},
					{ID: "2", Reason: "TYPE=BLOCK: not RBD"},
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got, err := ParseVM(readFixture(t, tc.file))
			if err != nil {
				t.Fatalf("ParseVM: %v", err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("ParseVM =\n%+v\nwant\n%+v", *got, tc.want)
			}
		})
	}
}

// vmWithDisks wraps DISK vectors (name -> value) into a minimal VM document.
func vmWithDisks(vmTMMadSystem string, disks ...map[string]string) string {
	var b strings.Builder
	b.WriteString("<VM><ID>7</ID><NAME>t</NAME><STATE>3</STATE><LCM_STATE>3</LCM_STATE><TEMPLATE>")
	for _, d := range disks {
		b.WriteString("<DISK>")
		for k, v := range d {
			fmt.Fprintf(&b, "<%s><![CDATA[%s]]></%s>", k, v, k)
		}
		b.WriteString("</DISK>")
	}
	if vmTMMadSystem != "" {
		fmt.Fprintf(&b, "<TM_MAD_SYSTEM><![CDATA[%s]]></TM_MAD_SYSTEM>", vmTMMadSystem)
	}
	b.WriteString("</TEMPLATE><USER_TEMPLATE/><HISTORY_RECORDS/></VM>")
	return b.String()
}

func rbd(extra map[string]string) map[string]string {
	d := map[string]string{"DISK_ID": "0", "TYPE": "RBD", "DISK_TYPE": "RBD", "SOURCE": "one/one-5", "CLONE": "NO"}
	for k, v := range extra {
		if v == "-" {
			delete(d, k)
		} else {
			d[k] = v
		}
	}
	return d
}

func TestDiskRules(t *testing.T) {
	tests := []struct {
		name    string
		vmTMS   string
		disk    map[string]string
		want    *vmdisk.Disk // nil: skipped (or error)
		skip    string       // substring of the skip reason
		wantErr string       // substring of the error
	}{
		{name: "persistent image", disk: rbd(nil), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5"}},
		{name: "clone", disk: rbd(map[string]string{"CLONE": "YES"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5-7-0"}},
		{name: "clone lower-case is not a clone for the driver", disk: rbd(map[string]string{"CLONE": "yes"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5"}},
		{name: "namespace in SOURCE", disk: rbd(map[string]string{"SOURCE": "one/ns1/one-5", "CLONE": "YES"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Namespace: "ns1", Name: "one-5-7-0"}},
		{name: "only DISK_TYPE RBD", disk: rbd(map[string]string{"TYPE": "FILE"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5"}},
		{name: "only TYPE RBD", disk: rbd(map[string]string{"DISK_TYPE": "-"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5"}},
		{name: "RBD_CDROM", disk: rbd(map[string]string{"TYPE": "RBD_CDROM", "READONLY": "YES"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5", ReadOnly: true}},
		{name: "CDROM type on RBD datastore", disk: rbd(map[string]string{"TYPE": "CDROM"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5"}},
		{name: "volatile fs, default pool", disk: map[string]string{"DISK_ID": "3", "TYPE": "fs", "DISK_TYPE": "RBD"}, want: &vmdisk.Disk{ID: "3", Pool: "one", Name: "one-sys-7-3"}},
		{name: "volatile swap with POOL_NAME", disk: map[string]string{"DISK_ID": "2", "TYPE": "SWAP", "DISK_TYPE": "RBD", "POOL_NAME": "fast"}, want: &vmdisk.Disk{ID: "2", Pool: "fast", Name: "one-sys-7-2"}},
		{name: "volatile on file system DS", disk: map[string]string{"DISK_ID": "2", "TYPE": "fs", "DISK_TYPE": "FILE"}, skip: "TYPE=fs DISK_TYPE=FILE: not RBD"},
		{name: "volatile with TYPE RBD-like DISK_TYPE block", disk: map[string]string{"DISK_ID": "2", "TYPE": "fs", "DISK_TYPE": "BLOCK"}, skip: "TYPE=BLOCK: not RBD"},
		{name: "block type wins over DISK_TYPE RBD", disk: rbd(map[string]string{"TYPE": "BLOCK"}), skip: "TYPE=BLOCK: not RBD"},
		{name: "iscsi", disk: rbd(map[string]string{"TYPE": "ISCSI", "DISK_TYPE": "ISCSI"}), skip: "not RBD"},
		{name: "lower-case rbd is not RBD for the driver", disk: rbd(map[string]string{"TYPE": "rbd", "DISK_TYPE": "FILE"}), skip: "not RBD"},
		{name: "file disk", disk: map[string]string{"DISK_ID": "1", "TYPE": "FILE", "DISK_TYPE": "FILE", "SOURCE": "/var/lib/one/datastores/1/abc"}, skip: "TYPE=FILE DISK_TYPE=FILE: not RBD"},
		{name: "ssh mode on the disk", disk: rbd(map[string]string{"TM_MAD_SYSTEM": " SSH "}), skip: "TM_MAD_SYSTEM=ssh"},
		{name: "ssh mode from the VM", vmTMS: "ssh", disk: rbd(nil), skip: "TM_MAD_SYSTEM=ssh"},
		{name: "disk TM_MAD_SYSTEM wins over VM", vmTMS: "ssh", disk: rbd(map[string]string{"TM_MAD_SYSTEM": "ceph"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5"}},
		{name: "shared mode is RBD", disk: rbd(map[string]string{"TM_MAD_SYSTEM": "shared"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5"}},
		{name: "shareable any case", disk: rbd(map[string]string{"SHAREABLE": "yes"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5", Shareable: true}},
		{name: "readonly", disk: rbd(map[string]string{"READONLY": "yes"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5", ReadOnly: true}},
		{name: "readonly NO", disk: rbd(map[string]string{"READONLY": "NO"}), want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5"}},
		{name: "ceph access", disk: rbd(map[string]string{"CEPH_USER": "client.libvirt", "CEPH_KEY": "/etc/ceph/k", "CEPH_CONF": "/etc/ceph/c.conf", "CEPH_SECRET": "uuid", "CEPH_HOST": "\tm1  m2:1234\n[::1] ::2 [fe80::1]:9"}),
			want: &vmdisk.Disk{ID: "0", Pool: "one", Name: "one-5", User: "libvirt", Keyring: "/etc/ceph/k", Conf: "/etc/ceph/c.conf",
				Monitors: []string{"m1:6789", "m2:1234", "[::1]:6789", "[::2]:6789", "[fe80::1]:9"}}},
		{name: "no DISK_ID", disk: rbd(map[string]string{"DISK_ID": "-"}), wantErr: "no DISK_ID"},
		{name: "bad DISK_ID", disk: rbd(map[string]string{"DISK_ID": "x"}), wantErr: "DISK_ID is not"},
		{name: "negative DISK_ID", disk: rbd(map[string]string{"DISK_ID": "-1"}), wantErr: "DISK_ID is not"},
		{name: "SOURCE without pool", disk: rbd(map[string]string{"SOURCE": "one-5"}), wantErr: "want POOL/IMAGE"},
		{name: "SOURCE too deep", disk: rbd(map[string]string{"SOURCE": "a/b/c/d"}), wantErr: "want POOL/IMAGE"},
		{name: "bad port", disk: rbd(map[string]string{"CEPH_HOST": "m1:99999"}), wantErr: "bad port"},
		{name: "port not a number", disk: rbd(map[string]string{"CEPH_HOST": "m1:abc"}), wantErr: "bad port"},
		{name: "unclosed bracket", disk: rbd(map[string]string{"CEPH_HOST": "[::1"}), wantErr: "missing ']'"},
		{name: "IPv4 in brackets", disk: rbd(map[string]string{"CEPH_HOST": "[10.0.0.1]:6789"}), wantErr: "not an IPv6"},
		{name: "messenger prefix", disk: rbd(map[string]string{"CEPH_HOST": "v2:10.0.0.1:3300"}), wantErr: "IPv6 in brackets"},
		{name: "empty host", disk: rbd(map[string]string{"CEPH_HOST": ":6789"}), wantErr: "bad host"},
		{name: "bracket in host", disk: rbd(map[string]string{"CEPH_HOST": "]0"}), wantErr: "bad host"},
		{name: "user in host", disk: rbd(map[string]string{"CEPH_HOST": "a@b:1"}), wantErr: "bad host"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVM([]byte(vmWithDisks(tc.vmTMS, tc.disk)))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseVM error = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error not on one line: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseVM: %v", err)
			}
			if tc.want == nil {
				if len(got.Disks) != 0 || len(got.Skipped) != 1 || !strings.Contains(got.Skipped[0].Reason, tc.skip) {
					t.Fatalf("got disks %+v skipped %+v, want skipped with %q", got.Disks, got.Skipped, tc.skip)
				}
				return
			}
			if len(got.Disks) != 1 || len(got.Skipped) != 0 {
				t.Fatalf("got disks %+v skipped %+v, want one disk", got.Disks, got.Skipped)
			}
			if !reflect.DeepEqual(got.Disks[0], *tc.want) {
				t.Errorf("disk =\n%+v\nwant\n%+v", got.Disks[0], *tc.want)
			}
		})
	}
}

func TestParseVMNonVectorDisk(t *testing.T) {
	doc := `<VM><ID>1</ID><STATE>3</STATE><LCM_STATE>3</LCM_STATE><TEMPLATE><DISK><![CDATA[oops]]></DISK></TEMPLATE></VM>`
	got, err := ParseVM([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Skipped) != 1 || got.Skipped[0].Reason != "DISK is not a vector attribute" {
		t.Errorf("Skipped = %+v", got.Skipped)
	}
}

func TestParseVMHistory(t *testing.T) {
	h := func(seq, host string, hid, ds string) string {
		return "<HISTORY><SEQ>" + seq + "</SEQ><HOSTNAME>" + host + "</HOSTNAME><HID>" + hid + "</HID><DS_ID>" + ds + "</DS_ID></HISTORY>"
	}
	tests := []struct {
		name      string
		records   string
		host      string
		hid, seq  int
		ds        int
		wantError string
	}{
		{"none", "<HISTORY_RECORDS/>", "", -1, -1, -1, ""},
		{"one", "<HISTORY_RECORDS>" + h("0", "n1", "1", "0") + "</HISTORY_RECORDS>", "n1", 1, 0, 0, ""},
		{"highest SEQ wins, not the last", "<HISTORY_RECORDS>" + h("2", "n3", "3", "100") + h("1", "n2", "2", "0") + "</HISTORY_RECORDS>", "n3", 3, 2, 100, ""},
		{"missing HID", "<HISTORY_RECORDS><HISTORY><SEQ>0</SEQ><HOSTNAME>n</HOSTNAME></HISTORY></HISTORY_RECORDS>", "n", -1, 0, -1, ""},
		{"bad SEQ", "<HISTORY_RECORDS>" + h("x", "n", "1", "0") + "</HISTORY_RECORDS>", "", 0, 0, 0, "SEQ"},
		{"missing SEQ", "<HISTORY_RECORDS><HISTORY><HOSTNAME>n</HOSTNAME></HISTORY></HISTORY_RECORDS>", "", 0, 0, 0, "no SEQ"},
		{"bad HID", "<HISTORY_RECORDS>" + h("0", "n", "", "0") + "</HISTORY_RECORDS>", "", 0, 0, 0, "HID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := "<VM><ID>1</ID><STATE>3</STATE><LCM_STATE>3</LCM_STATE><TEMPLATE/>" + tc.records + "</VM>"
			got, err := ParseVM([]byte(doc))
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("err = %v, want %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "highest SEQ wins, not the last" && !reflect.DeepEqual(got.History, []Placement{{1, "n2", 0}, {2, "n3", 0}}) {
				t.Errorf("history %+v, want every record in SEQ order", got.History)
			}
			if got.Host != tc.host || got.HostID != tc.hid || got.Seq != tc.seq || got.SystemDSID != tc.ds {
				t.Errorf("got host %q hid %d seq %d ds %d, want %q %d %d %d", got.Host, got.HostID, got.Seq, got.SystemDSID, tc.host, tc.hid, tc.seq, tc.ds)
			}
		})
	}
}

func TestParseVMErrors(t *testing.T) {
	deep := strings.Repeat("<A>", 100) + strings.Repeat("</A>", 100)
	tests := []struct {
		name, doc, want string
	}{
		{"empty", "", "no root element"},
		{"not XML", "hello", "text outside the root"},
		{"wrong root", "<VM_POOL></VM_POOL>", "root element is <VM_POOL>"},
		{"unterminated", "<VM><ID>1</ID>", "XML"},
		{"two roots", "<VM></VM><VM></VM>", "more than one root"},
		{"trailing text", "<VM><ID>1</ID><STATE>1</STATE><LCM_STATE>0</LCM_STATE></VM>junk", "text outside"},
		{"no ID", "<VM><STATE>1</STATE><LCM_STATE>0</LCM_STATE></VM>", "no ID"},
		{"bad ID", "<VM><ID>x\ny</ID></VM>", "ID \"x y\" is not an integer"},
		{"negative ID", "<VM><ID>-4</ID></VM>", "negative"},
		{"no STATE", "<VM><ID>1</ID><LCM_STATE>0</LCM_STATE></VM>", "no STATE"},
		{"bad LCM_STATE", "<VM><ID>1</ID><STATE>1</STATE><LCM_STATE>?</LCM_STATE></VM>", "LCM_STATE"},
		{"too deep", "<VM>" + deep + "</VM>", "nested deeper"},
		{"mismatched tags", "<VM><ID>1</VM>", "XML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseVM([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseVM error = %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error not on one line: %q", err)
			}
		})
	}
}

// FuzzParseVM checks that no input makes ParseVM panic, that errors fit on
// one line and that every disk it returns names a usable image.
func FuzzParseVM(f *testing.F) {
	for _, name := range []string{"vm-42-running.xml", "vm-43-ssh.xml", "vm-44-pending.xml", "vm-45-pretty.xml"} {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte(vmWithDisks("", rbd(map[string]string{"CLONE": "YES", "CEPH_HOST": "m1 [::1]:3300 ::2"}))))
	f.Add([]byte(vmWithDisks("ssh", map[string]string{"DISK_ID": "1", "TYPE": "fs", "DISK_TYPE": "RBD"})))
	f.Add([]byte("<VM><ID>1</ID><STATE>3</STATE><LCM_STATE>3</LCM_STATE><TEMPLATE><DISK><DISK_ID>0</DISK_ID><TYPE>RBD</TYPE></DISK></TEMPLATE></VM>"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		info, err := ParseVM(doc)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error not on one line: %q", err)
			}
			return
		}
		for _, d := range info.Disks {
			if d.ID == "" || d.Pool == "" || d.Name == "" {
				t.Fatalf("incomplete disk %+v", d)
			}
			if _, _, _, err := vmdisk.ParseImage(d.Image()); err != nil {
				t.Fatalf("disk image %q does not parse: %v", d.Image(), err)
			}
			for _, m := range d.Monitors {
				if _, _, err := net.SplitHostPort(m); err != nil {
					t.Fatalf("monitor %q: %v", m, err)
				}
			}
		}
	})
}
