package domxml

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var oneMons = []string{"10.0.0.11:6789", "10.0.0.12:6789", "10.0.0.13:6789"}

func TestParseFiles(t *testing.T) {
	tests := []struct {
		file string
		want *Domain
	}{
		{
			// As OpenNebula's LibVirtDriverKVM writes the deployment file:
			// <auth> is a child of <disk>, tabs, double quotes, CLONE=YES
			// (one-5-42-0), volatile (one-sys-42-1), SHAREABLE, RBD_CDROM.
			file: "one-42-deployment.xml",
			want: &Domain{
				Name: "one-42",
				VMID: 42,
				Disks: []vmdisk.Disk{
					{ID: "vda", Pool: "one", Name: "one-5-42-0", Monitors: oneMons, User: "libvirt"},
					{ID: "vdb", Pool: "one", Name: "one-sys-42-1", Monitors: oneMons, User: "libvirt"},
					{ID: "vdc", Pool: "one", Name: "one-7", Monitors: oneMons, User: "libvirt", Shareable: true},
					{ID: "sda", Pool: "one", Name: "one-9", Monitors: oneMons[:1], User: "libvirt", ReadOnly: true},
				},
				OpenNebula: &OpenNebulaMeta{
					SystemDatastore:   "/var/lib/one//datastores/0/42",
					Name:              "web-1",
					UName:             "oneadmin",
					GName:             "oneadmin",
					OpenNebulaVersion: "6.6.0",
					STime:             1700000000,
					DeploymentTime:    1700000123,
				},
			},
		},
		{
			// As libvirt hands it to the qemu hook: <auth> inside <source>,
			// index, alias, IPv6 monitor, default port, namespace, config.
			file: "one-42-live.xml",
			want: &Domain{
				Name: "one-42",
				UUID: "0f9c6a32-5a54-4b5e-8e2f-3c4d1f0a7b42",
				VMID: 42,
				Disks: []vmdisk.Disk{
					{ID: "vda", Pool: "one", Name: "one-5-42-0", User: "libvirt",
						Monitors: []string{"[2001:db8::11]:3300", "ceph-mon-2.example.org:6789"}},
					{ID: "vdb", Pool: "ssd", Namespace: "tenant-a", Name: "one-11-42-1", User: "tenant-a",
						Monitors: []string{"10.0.0.11:6789"}, Conf: "/etc/ceph/ssd.conf",
						ReadOnly: true, Shareable: true},
				},
				OpenNebula: &OpenNebulaMeta{
					SystemDatastore:   "/var/lib/one//datastores/0/42",
					Name:              "web-1",
					UName:             "alice",
					UID:               5,
					GName:             "users",
					GID:               1,
					OpenNebulaVersion: "6.8.0",
					STime:             1700000000,
					DeploymentTime:    1700009999,
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Parse(readTestdata(t, tt.file))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tt.want)
				for i := range got.Disks {
					t.Logf("disk %d: %+v", i, got.Disks[i])
				}
				if got.OpenNebula != nil {
					t.Logf("metadata: %+v", *got.OpenNebula)
				}
			}
		})
	}
}

// domainWith wraps devices (and optional metadata) in a minimal domain.
func domainWith(name, devices, metadata string) string {
	return "<domain type='kvm'><name>" + name + "</name>" + metadata +
		"<devices>" + devices + "</devices></domain>"
}

func rbd(name, hosts, extra string) string {
	return "<disk type='network' device='disk'><source protocol='rbd' name='" + name + "'>" +
		hosts + "</source><target dev='vda' bus='virtio'/>" + extra + "</disk>"
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		xml     string
		want    *Domain
		wantErr string
	}{
		{
			name: "no disks, not OpenNebula",
			xml:  "<domain type='qemu'><name>test-vm</name></domain>",
			want: &Domain{Name: "test-vm", VMID: -1},
		},
		{
			name: "only file and non-rbd network disks",
			xml: domainWith("one-1",
				"<disk type='file' device='disk'><source file='/var/lib/one/datastores/0/1/disk.0'/><target dev='vda'/></disk>"+
					"<disk type='network' device='disk'><source protocol='nbd' name='x'><host name='h' port='1'/></source><target dev='vdb'/></disk>"+
					"<disk type='network' device='disk'><source protocol='gluster' name='vol/img'/><target dev='vdc'/></disk>", ""),
			want: &Domain{Name: "one-1", VMID: 1},
		},
		{
			name: "rbd without hosts uses the configured access",
			xml:  domainWith("one-0", rbd("one/one-3", "", ""), ""),
			want: &Domain{Name: "one-0", VMID: 0, Disks: []vmdisk.Disk{{ID: "vda", Pool: "one", Name: "one-3"}}},
		},
		{
			name: "protocol case-insensitive, bracketed IPv6, no port",
			xml: domainWith("one-7", "<disk type='network' device='disk'><source protocol='RBD' name='one/one-3'>"+
				"<host name='[fd00::1]'/><host name='::1' port='6790'/></source><target dev='vda'/></disk>", ""),
			want: &Domain{Name: "one-7", VMID: 7, Disks: []vmdisk.Disk{{ID: "vda", Pool: "one", Name: "one-3",
				Monitors: []string{"[fd00::1]:6789", "[::1]:6790"}}}},
		},
		{
			name: "metadata prefix declared on the root element",
			xml: "<domain type='kvm' xmlns:one='http://opennebula.org/xmlns/libvirt/1.0'><name>one-9</name>" +
				"<metadata><one:vm><one:deployment_time>17</one:deployment_time></one:vm></metadata></domain>",
			want: &Domain{Name: "one-9", VMID: 9, OpenNebula: &OpenNebulaMeta{DeploymentTime: 17}},
		},
		{
			name: "foreign metadata only",
			xml:  "<domain type='kvm'><name>one-9</name><metadata><x:y xmlns:x='urn:x'>1</x:y></metadata></domain>",
			want: &Domain{Name: "one-9", VMID: 9},
		},
		{
			name: "metadata in the namespace but no vm element",
			xml:  "<domain type='kvm'><name>one-9</name><metadata><o:other xmlns:o='http://opennebula.org/xmlns/libvirt/1.0'/></metadata></domain>",
			want: &Domain{Name: "one-9", VMID: 9},
		},
		{name: "empty", xml: "  \n", wantErr: "domain XML: empty document"},
		{name: "not XML", xml: "deploy me", wantErr: "domain XML: EOF"},
		{name: "not a domain", xml: "<network><name>default</name></network>", wantErr: "expected element type <domain>"},
		{name: "truncated", xml: "<domain type='kvm'><name>one-1</name><devices>", wantErr: "domain XML: XML syntax error"},
		{name: "no name", xml: "<domain type='kvm'></domain>", wantErr: "domain XML: no <name>"},
		{
			name:    "rbd without name",
			xml:     domainWith("one-1", rbd("", "", ""), ""),
			wantErr: "domain XML one-1: rbd disk vda: <source protocol='rbd'> has no name",
		},
		{
			name:    "rbd name without pool",
			xml:     domainWith("one-1", rbd("one-3", "", ""), ""),
			wantErr: `domain XML one-1: rbd disk vda: image "one-3": want POOL/IMAGE or POOL/NAMESPACE/IMAGE`,
		},
		{
			name:    "rbd name with snapshot path",
			xml:     domainWith("one-1", rbd("one/a/b/c", "", ""), ""),
			wantErr: `image "one/a/b/c"`,
		},
		{
			name:    "bad port",
			xml:     domainWith("one-1", rbd("one/one-3", "<host name='10.0.0.1' port='x'/>", ""), ""),
			wantErr: `rbd disk vda: monitor host "10.0.0.1": bad port "x"`,
		},
		{
			name:    "port out of range",
			xml:     domainWith("one-1", rbd("one/one-3", "<host name='10.0.0.1' port='70000'/>", ""), ""),
			wantErr: `bad port "70000"`,
		},
		{
			name:    "host without name",
			xml:     domainWith("one-1", rbd("one/one-3", "<host port='6789'/>", ""), ""),
			wantErr: "rbd disk vda: <host> without name",
		},
		{
			name:    "unix socket host",
			xml:     domainWith("one-1", rbd("one/one-3", "<host transport='unix' socket='/run/x.sock'/>", ""), ""),
			wantErr: `transport "unix" is not supported`,
		},
		{
			name: "bad metadata number",
			xml: domainWith("one-1", "", "<metadata><one:vm xmlns:one='http://opennebula.org/xmlns/libvirt/1.0'>"+
				"<one:uid>root</one:uid></one:vm></metadata>"),
			wantErr: "domain XML one-1: OpenNebula metadata: strconv.ParseInt",
		},
		{
			name: "two metadata blocks",
			xml: domainWith("one-1", "", "<metadata><one:vm xmlns:one='http://opennebula.org/xmlns/libvirt/1.0'/>"+
				"<one:vm xmlns:one='http://opennebula.org/xmlns/libvirt/1.0'/></metadata>"),
			wantErr: "2 <one:vm> blocks, want one",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.xml))
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse: no error, want %q; got %+v", tt.wantErr, got)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Parse error %q, want it to contain %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("Parse error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestVMIDFromName(t *testing.T) {
	tests := []struct {
		name string
		want int
	}{
		{"one-0", 0},
		{"one-42", 42},
		{"one-2147483647", 2147483647},
		{"one-", -1},
		{"one", -1},
		{"one-042", -1},
		{"one--1", -1},
		{"one-+1", -1},
		{"one-4a", -1},
		{"one-42-1", -1},
		{"ONE-42", -1},
		{"test-42", -1},
		{"one-99999999999999999999999", -1},
		{"", -1},
	}
	for _, tt := range tests {
		if got := VMIDFromName(tt.name); got != tt.want {
			t.Errorf("VMIDFromName(%q) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"one-42-deployment.xml", "one-42-live.xml"} {
		f.Add(readTestdata(f, name))
	}
	f.Add([]byte(domainWith("one-1", rbd("one/one-3", "<host name='[::1]' port='6789'/>", "<shareable/><readonly/>"), "")))
	f.Add([]byte(domainWith("one-1", rbd("p/ns/img", "<host name='h'/>", ""), "<metadata><one:vm xmlns:one='http://opennebula.org/xmlns/libvirt/1.0'><one:stime>1</one:stime></one:vm></metadata>")))
	f.Add([]byte("<domain><name>x</name><devices><disk type='network'><source protocol='rbd'/></disk></devices></domain>"))
	f.Add([]byte("<domain"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, doc []byte) {
		type result struct {
			d   *Domain
			err error
		}
		done := make(chan result, 1)
		go func() { d, err := Parse(doc); done <- result{d, err} }()
		var d *Domain
		var err error
		select {
		case r := <-done:
			d, err = r.d, r.err
		case <-time.After(5 * time.Second):
			t.Fatalf("Parse hangs on %q", doc)
		}
		if err != nil {
			if d != nil {
				t.Fatalf("Parse returned a domain with error %v", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		if d.Name == "" {
			t.Fatal("Parse accepted a domain without a name")
		}
		if d.VMID != VMIDFromName(d.Name) {
			t.Fatalf("VMID %d for name %q", d.VMID, d.Name)
		}
		for _, disk := range d.Disks {
			if disk.Pool == "" || disk.Name == "" {
				t.Fatalf("disk without pool or name: %+v", disk)
			}
			if _, _, _, err := vmdisk.ParseImage(disk.Image()); err != nil {
				t.Fatalf("disk image %q does not round-trip: %v", disk.Image(), err)
			}
			for _, m := range disk.Monitors {
				if !strings.Contains(m, ":") {
					t.Fatalf("monitor %q without port", m)
				}
			}
		}
	})
}

// TestInstance: the identity of a domain is its <one:deployment_time>; 0
// without OpenNebula metadata.
func TestInstance(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want int64
	}{
		{"deployment file", string(readTestdata(t, "one-42-deployment.xml")), 1700000123},
		{"live XML after a migration", string(readTestdata(t, "one-42-live.xml")), 1700009999},
		{"no metadata", `<domain type='kvm'><name>one-42</name></domain>`, 0},
		{"metadata without deployment_time", `<domain type='kvm'><name>one-42</name><metadata><one:vm xmlns:one="http://opennebula.org/xmlns/libvirt/1.0"><one:name>x</one:name></one:vm></metadata></domain>`, 0},
		{"negative value", `<domain type='kvm'><name>one-42</name><metadata><one:vm xmlns:one="http://opennebula.org/xmlns/libvirt/1.0"><one:deployment_time>-5</one:deployment_time></one:vm></metadata></domain>`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Instance(); got != tc.want {
				t.Fatalf("Instance() = %d, want %d", got, tc.want)
			}
		})
	}
}
