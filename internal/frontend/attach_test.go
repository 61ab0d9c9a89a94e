package frontend

import (
	"strings"
	"testing"
)

func TestParseAttachArgs(t *testing.T) {
	ok := []string{"one-7", "/var/lib/one/datastores/0/7/disk.1", "vdb", "1", "PERSISTENT_DRV_MSG", "7", "node1"}
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"as oned runs it", ok, ""},
		{"too few", ok[:6], "wrong number of arguments (6)"},
		{"bad vm", append(append([]string{}, ok[:5]...), "x", "node1"), `VM id "x"`},
		{"bad host", append(append([]string{}, ok[:6]...), "-oProxyCommand=x"), "host"},
		{"no target", []string{"one-7", "/p", "", "1", "m", "7", "node1"}, "no disk target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseAttachArgs(tc.args)
			if tc.err == "" {
				if err != nil || a.VM != 7 || a.Host != "node1" || a.Target != "vdb" || len(a.Raw) != 7 {
					t.Fatalf("got %+v, %v", a, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

const attachVM = `<VM><ID>7</ID><NAME>x</NAME><STATE>3</STATE><LCM_STATE>3</LCM_STATE>
<TEMPLATE>
<DISK><DISK_ID>0</DISK_ID><SOURCE>one/one-1</SOURCE><TYPE>RBD</TYPE><TM_MAD>ceph</TM_MAD><DISK_TYPE>RBD</DISK_TYPE><CEPH_HOST>10.0.0.1:6789</CEPH_HOST><PERSISTENT>YES</PERSISTENT></DISK>
<DISK><ATTACH>YES</ATTACH><DISK_ID>1</DISK_ID><SOURCE>one/one-2</SOURCE><TYPE>RBD</TYPE><TM_MAD>ceph</TM_MAD><DISK_TYPE>RBD</DISK_TYPE><CEPH_HOST>10.0.0.1:6789</CEPH_HOST><PERSISTENT>YES</PERSISTENT></DISK>
</TEMPLATE></VM>`

func TestAttachedDisks(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      string // image of the attached disk, "" for none
		err       string
	}{
		{"the ATTACH=YES disk", "<VMM_DRIVER_ACTION_DATA><HOST>h</HOST>" + attachVM + "</VMM_DRIVER_ACTION_DATA>", "one/one-2", ""},
		{"another VM", "<VMM_DRIVER_ACTION_DATA>" + strings.Replace(attachVM, "<ID>7</ID>", "<ID>8</ID>", 1) + "</VMM_DRIVER_ACTION_DATA>", "", "VM 8, not 7"},
		{"no attached disk", "<VMM_DRIVER_ACTION_DATA>" + strings.Replace(attachVM, "<ATTACH>YES</ATTACH>", "", 1) + "</VMM_DRIVER_ACTION_DATA>", "", "no DISK with ATTACH=YES"},
		{"not a driver action", attachVM, "", "want <VMM_DRIVER_ACTION_DATA>"},
		{"no VM", "<VMM_DRIVER_ACTION_DATA><HOST>h</HOST></VMM_DRIVER_ACTION_DATA>", "", "no <VM>"},
		{"broken XML", "<VMM_DRIVER_ACTION_DATA><VM>", "", "not well-formed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disks, _, err := attachedDisks([]byte(tc.doc), 7)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || len(disks) != 1 || disks[0].Image() != tc.want || disks[0].ID != "1" {
				t.Fatalf("got %+v, %v; want %s", disks, err, tc.want)
			}
		})
	}
}
