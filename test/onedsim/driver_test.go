package onedsim_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/onedsim"
)

func TestWriteLocalDeployFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vms", "42")
	if err := onedsim.WriteLocalDeployFiles(dir, "<VM><ID>42</ID></VM>", ""); err != nil {
		t.Fatal(err)
	}
	vm, _ := os.ReadFile(filepath.Join(dir, "vm.xml"))
	if string(vm) != base64.StdEncoding.EncodeToString([]byte("<VM><ID>42</ID></VM>")) {
		t.Fatalf("vm.xml %q, want base64", vm)
	}
	if ds, err := os.ReadFile(filepath.Join(dir, "ds.xml")); err != nil || len(ds) != 0 {
		t.Fatalf("ds.xml %q %v, want empty", ds, err)
	}
}

func TestParseDriverArgs(t *testing.T) {
	ours := map[string]string{"DEPLOY": "deploy-rbdfence"}
	for _, tc := range []struct {
		args  string
		hv    string
		local map[string]string
		deleg map[string]string
		bad   bool
	}{
		{args: "-t 15 -r 0 kvm -p", hv: "kvm", local: map[string]string{}},
		{args: "-t 15 -r 0 kvm -l deploy=deploy-rbdfence", hv: "kvm", local: ours},
		{args: "-t 15 -r 0 kvm -l save -p -l deploy=deploy-rbdfence", hv: "kvm", local: ours},
		{args: "-t 15 -r 0 kvm -l deploy=deploy-rbdfence -p -l poll=poll_x", hv: "kvm", local: map[string]string{"POLL": "poll_x"}},
		{args: "kvm --loc deploy=deploy-rbdfence", hv: "kvm", local: ours},
		{args: "kvm --local=deploy=deploy-rbdfence", hv: "kvm", local: ours},
		{args: "kvm -ldeploy=deploy-rbdfence", hv: "kvm", local: ours},
		{args: "kvm -pl deploy=deploy-rbdfence", hv: "kvm", local: ours},
		{args: "-l migrate=migrate_local,save -t 15 kvm", hv: "kvm", local: map[string]string{"MIGRATE": "migrate_local", "SAVE": ""}},
		{args: "-t kvm", hv: "", bad: true}, // -t eats "kvm": no hypervisor word left
		{args: "kvm -d deploy", hv: "kvm", local: map[string]string{}, deleg: map[string]string{"DEPLOY": ""}},
		{args: "kvm -l", bad: true},
		{args: "kvm --lo", bad: true},
		{args: "kvm -x", bad: true},
		{args: "kvm --p=1", bad: true},
	} {
		t.Run(tc.args, func(t *testing.T) {
			a, err := onedsim.ParseDriverArgs(tc.args)
			if tc.bad {
				if err == nil {
					t.Fatalf("want an error, got %+v", a)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Hypervisor != tc.hv || !reflect.DeepEqual(a.Local, tc.local) {
				t.Fatalf("got %q %v, want %q %v", a.Hypervisor, a.Local, tc.hv, tc.local)
			}
			deleg := tc.deleg
			if deleg == nil {
				deleg = map[string]string{"MIGRATE": ""}
			}
			if !reflect.DeepEqual(a.Delegate, deleg) {
				t.Fatalf("delegate %v, want %v", a.Delegate, deleg)
			}
		})
	}
}

func TestLiveMigration(t *testing.T) {
	for _, tc := range []struct {
		name, sys string
		local     map[string]string
		fail      string // script that fails
		ok        bool
		want      string
	}{
		{"ceph system DS, remote migrate", "ceph", nil, "", true, "tm ceph/premigrate|vmm-remote migrate|tm ceph/postmigrate"},
		{"ceph premigrate fails: aborted", "ceph", nil, "ceph/premigrate", false, "tm ceph/premigrate|tm ceph/failmigrate"},
		// migrate_other ignores tm/ceph/premigrate's failure.
		{"shared: ceph premigrate failure ignored", "shared", nil, "ceph/premigrate", true, "tm ceph/premigrate|vmm-remote migrate|tm ceph/postmigrate"},
		// common/failmigrate: tm/ceph/failmigrate never runs.
		{"shared: failed migrate, no ceph failmigrate", "shared", nil, "migrate", false, "tm ceph/premigrate|vmm-remote migrate"},
		{"local migrate action", "shared", map[string]string{"MIGRATE": "migrate-rbdfence"}, "migrate-rbdfence", false, "tm ceph/premigrate|vmm-local migrate-rbdfence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			m := onedsim.LiveMigration{SystemTM: tc.sys, DiskTMs: []string{"ceph", "ceph"}, Local: tc.local, Run: func(s onedsim.MigrationStep) int {
				got = append(got, s.Kind+" "+s.Script)
				if s.Script == tc.fail {
					return 1
				}
				return 0
			}}
			ok, _ := m.Migrate(42, "one-42", "n1", "n2", "/var/lib/one/datastores/0/42", 0, "<VM/>", "<VMM_DRIVER_ACTION_DATA/>")
			if ok != tc.ok || strings.Join(got, "|") != tc.want {
				t.Fatalf("ok %v steps %q, want %v %q", ok, got, tc.ok, tc.want)
			}
		})
	}
}
