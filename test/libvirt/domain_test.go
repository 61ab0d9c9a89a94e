package libvirttest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/rbdfence/rbdfence/internal/domxml"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// TestDomainXML checks DomainXML against the parser the hook uses: what
// we start in tests must read back as the disks we asked for.
func TestDomainXML(t *testing.T) {
	tests := []struct {
		name    string
		domType string
		disks   []RBDDisk
		want    []vmdisk.Disk
	}{
		{name: "rbdfence-test-empty", domType: "qemu"},
		{
			name:    "one-42",
			domType: "kvm",
			disks: []RBDDisk{
				{Image: "one/one-5-42-0", Mon: "127.0.0.1:6800", User: "libvirt", SecretUUID: "5b2f3a0e-6a5e-4d0e-9b66-0f1e8c4f6d21"},
				{Image: "one/one-7", Mon: "[::1]:3300", User: "libvirt", SecretUUID: "5b2f3a0e-6a5e-4d0e-9b66-0f1e8c4f6d21", Shareable: true},
				{Image: "ssd/ns/img", Mon: "10.0.0.1:6789"},
			},
			want: []vmdisk.Disk{
				{ID: "vda", Pool: "one", Name: "one-5-42-0", Monitors: []string{"127.0.0.1:6800"}, User: "libvirt"},
				{ID: "vdb", Pool: "one", Name: "one-7", Monitors: []string{"[::1]:3300"}, User: "libvirt", Shareable: true},
				{ID: "vdc", Pool: "ssd", Namespace: "ns", Name: "img", Monitors: []string{"10.0.0.1:6789"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := DomainXML(tt.name, tt.domType, tt.disks)
			d, err := domxml.Parse([]byte(x))
			if err != nil {
				t.Fatalf("domxml.Parse: %v\n%s", err, x)
			}
			if d.Name != tt.name || !reflect.DeepEqual(d.Disks, tt.want) {
				t.Errorf("round trip: got %s %+v, want %s %+v\n%s", d.Name, d.Disks, tt.name, tt.want, x)
			}
			var dom libvirtxml.Domain
			if err := dom.Unmarshal(x); err != nil {
				t.Fatal(err)
			}
			if dom.Type != tt.domType || dom.OS.Type.Machine != "pc" || dom.OS.Type.Type != "hvm" ||
				dom.OnPoweroff != "destroy" || dom.Memory.Value > 128 || dom.Memory.Unit != "MiB" {
				t.Errorf("domain basics wrong:\n%s", x)
			}
			if len(dom.Devices.Graphics) != 0 {
				t.Errorf("domain has graphics:\n%s", x)
			}
			for i, disk := range dom.Devices.Disks {
				if disk.Alias != nil || disk.Target.Bus != "virtio" || disk.Driver.Cache != "none" {
					t.Errorf("disk %d: want virtio, cache none, no alias:\n%s", i, x)
				}
				if tt.disks[i].User != "" && (disk.Auth == nil || disk.Auth.Secret.Type != "ceph" ||
					disk.Auth.Secret.UUID != tt.disks[i].SecretUUID) {
					t.Errorf("disk %d: want ceph secret auth:\n%s", i, x)
				}
			}
		})
	}
}

func TestDomainXMLBadMon(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `monitor "127.0.0.1"`) {
			t.Errorf("recover() = %v, want a panic naming the monitor", r)
		}
	}()
	DomainXML("x", "qemu", []RBDDisk{{Image: "one/x", Mon: "127.0.0.1"}})
}

func TestDiskTarget(t *testing.T) {
	for i, want := range map[int]string{0: "vda", 1: "vdb", 25: "vdz"} {
		if got := DiskTarget(i); got != want {
			t.Errorf("DiskTarget(%d) = %q, want %q", i, got, want)
		}
	}
}

func TestParseExports(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
	}{
		{name: "empty", in: "", want: map[string]string{}},
		{
			name: "cluster.sh style, several per line",
			in: "starting...\nexport RBDFENCE_TEST_MON=127.0.0.1:6800 RBDFENCE_TEST_CONF=/run/x/ceph.conf\n" +
				"export RBDFENCE_TEST_USER=libvirt\n# comment\n",
			want: map[string]string{"RBDFENCE_TEST_MON": "127.0.0.1:6800", "RBDFENCE_TEST_CONF": "/run/x/ceph.conf", "RBDFENCE_TEST_USER": "libvirt"},
		},
		{
			name: "quotes",
			in:   `export A='x y' B="z" C= D=a'b c'd`,
			want: map[string]string{"A": "x y", "B": "z", "C": "", "D": "ab cd"},
		},
		{
			name: "cluster.sh quoting of a single quote",
			in:   `export P='/tmp/it'\''s dir'`,
			want: map[string]string{"P": "/tmp/it's dir"},
		},
		{name: "trailing backslash", in: `export A=x\`, wantErr: "trailing backslash"},
		{name: "not an assignment", in: "export FOO", wantErr: `"FOO" is not NAME=VALUE`},
		{name: "unterminated quote", in: "export A='x", wantErr: "unterminated ' quote"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseExports(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseExports error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseExports = %v, want %v", got, tt.want)
			}
		})
	}
}

// Real qemu-io output as it lands in /var/log/libvirt/qemu/DOMAIN.log.
const (
	ioWrote   = "wrote 4096/4096 bytes at offset 0\n4 KiB, 1 ops; 00.00 sec (13.281 MiB/sec and 3399.9150 ops/sec)\n"
	ioBadRead = "Pattern verification failed at offset 0, 4096 bytes\nread 4096/4096 bytes at offset 0\n" +
		"4 KiB, 1 ops; 00.00 sec (16.183 MiB/sec and 4142.8796 ops/sec)\n"
	ioFailed = "write failed: Cannot send after transport endpoint shutdown\n"
)

func TestWaitLogOutput(t *testing.T) {
	tests := []struct {
		name   string
		before string   // log content before the command
		chunks []string // appended over time
		want   string
		min    time.Duration // at least this long (settle)
	}{
		{name: "write in two chunks", before: "old line\n", chunks: []string{"wrote 4096/4096 bytes at offset 0\n", "4 KiB, 1 ops; 00.00 sec (1 MiB/sec and 1 ops/sec)\n"},
			want: "wrote 4096/4096 bytes at offset 0\n4 KiB, 1 ops; 00.00 sec (1 MiB/sec and 1 ops/sec)\n"},
		{name: "pattern failure", chunks: []string{ioBadRead}, want: ioBadRead},
		{name: "failed write", before: ioWrote, chunks: []string{ioFailed}, want: ioFailed},
		{name: "unknown output settles", chunks: []string{"something else\n"}, want: "something else\n", min: settle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dom.log")
			if err := os.WriteFile(path, []byte(tt.before), 0o600); err != nil {
				t.Fatal(err)
			}
			go func() {
				f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					return
				}
				defer f.Close()
				for _, c := range tt.chunks {
					time.Sleep(50 * time.Millisecond)
					f.WriteString(c)
				}
			}()
			start := time.Now()
			got, err := waitLogOutput(path, int64(len(tt.before)), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("waitLogOutput = %q, want %q", got, tt.want)
			}
			if d := time.Since(start); d < tt.min || d > 3*time.Second {
				t.Errorf("waitLogOutput took %s", d)
			}
		})
	}
}

func TestWaitLogOutputTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dom.log")
	if err := os.WriteFile(path, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := waitLogOutput(path, 2, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no qemu-io output") {
		t.Errorf("waitLogOutput error = %v, want no output", err)
	}
}
