package onedsim_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
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
