package frontend

import (
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/onedsim"
)

const ours = "deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence"

// confWith is an oned.conf excerpt shaped like share/etc/oned.conf of
// release-7.4.0: kvm, the "qemu" variant that runs the same kvm driver
// (:488-498), and lxc.
func confWith(kvm, qemu string) string {
	return `# oned.conf
#VM_MAD = [
#    NAME           = "kvm",
#    ARGUMENTS      = "-t 15 -r 0 kvm",
#]
VM_MAD = [
    NAME           = "kvm",
    SUNSTONE_NAME  = "KVM",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "` + kvm + `",
    DEFAULT        = "vmm_exec/vmm_exec_kvm.conf",
    TYPE           = "kvm"
]

# This variant should be used for nested virtualization
VM_MAD = [
    NAME           = "qemu",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "` + qemu + `",
    TYPE           = "qemu" ]

VM_MAD = [
    NAME           = "lxc",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "-t 15 -r 0 lxc -l deploy=deploy_lxc",
    TYPE           = "xml"
]
`
}

// asDriverReads checks, with the stand-in's own reading of GetoptLong
// (test/onedsim, written from one_vmm_exec.rb), that ARGUMENTS run our
// three actions.
func asDriverReads(t *testing.T, args, migrate string) {
	t.Helper()
	a, err := onedsim.ParseDriverArgs(args)
	if err != nil {
		t.Fatalf("the driver would not start with %q: %v", args, err)
	}
	if a.Hypervisor != "kvm" || a.Local["DEPLOY"] != "deploy-rbdfence" || a.Local["RESTORE"] != "restore-rbdfence" || a.Local["MIGRATE"] != migrate {
		t.Fatalf("the driver reads %q as %s %v", args, a.Hypervisor, a.Local)
	}
}

func TestPlanOnedConf(t *testing.T) {
	for _, tc := range []struct {
		name, kvm, wantKVM string
		migrate            string // the local migrate script the driver then runs
		wrapped            string
		problem            string
	}{
		{name: "stock", kvm: "-t 15 -r 0 kvm -p", wantKVM: "-t 15 -r 0 kvm -p -l " + ours},
		{name: "last -l wins", kvm: "-t 15 -r 0 kvm -l save -p -l poll=poll_x",
			wantKVM: "-t 15 -r 0 kvm -l save -p -l poll=poll_x," + ours},
		{name: "abbreviated --loc", kvm: "-t 15 -r 0 kvm --loc save", wantKVM: "-t 15 -r 0 kvm --loc save," + ours},
		{name: "--local=", kvm: "-t 15 -r 0 kvm --local=save -p", wantKVM: "-t 15 -r 0 kvm --local=save," + ours + " -p"},
		{name: "-lLIST", kvm: "kvm -lsave", wantKVM: "kvm -lsave," + ours},
		{name: "clustered -pl", kvm: "kvm -pl save", wantKVM: "kvm -pl save," + ours},
		{name: "migrate_local wrapped", kvm: "-t 15 -r 0 kvm -l migrate=migrate_local,save",
			wantKVM: "-t 15 -r 0 kvm -l migrate=migrate_local-rbdfence,save,deploy=deploy-rbdfence,restore=restore-rbdfence,attach_disk=attach-rbdfence",
			migrate: "migrate_local-rbdfence", wrapped: "migrate_local"},
		{name: "already ours", kvm: "-t 15 kvm -l " + ours, wantKVM: "-t 15 kvm -l " + ours},
		{name: "someone's deploy", kvm: "kvm -l deploy=deploy-tweaks", problem: "local deploy action (deploy=deploy-tweaks)"},
		{name: "someone's attach_disk", kvm: "kvm -l attach_disk=attach_x", problem: "local attach_disk action (attach_disk=attach_x)"},
		{name: "bare migrate", kvm: "kvm -l migrate", problem: "runs the migrate script itself"},
		{name: "driver would not start", kvm: "kvm -l", problem: "would not start the driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := confWith(tc.kvm, "-t 15 -r 0 kvm")
			p := PlanOnedConf([]byte(conf))
			if tc.problem != "" {
				if len(p.Problems) != 1 || !strings.Contains(p.Problems[0], tc.problem) || !strings.Contains(p.Problems[0], `"kvm"`) {
					t.Fatalf("problems %q, want one about %q", p.Problems, tc.problem)
				}
				if !strings.Contains(string(p.New), `"`+tc.kvm+`"`) {
					t.Fatal("a VM_MAD with a problem was changed")
				}
				return
			}
			if len(p.Problems) != 0 {
				t.Fatalf("problems: %q", p.Problems)
			}
			want := confWith(tc.wantKVM, "-t 15 -r 0 kvm -l "+ours)
			if string(p.New) != want {
				t.Fatalf("got\n%s\nwant\n%s", p.New, want)
			}
			mig := tc.migrate
			if mig == "" {
				mig = "migrate-rbdfence"
			}
			asDriverReads(t, tc.wantKVM, mig)
			asDriverReads(t, "-t 15 -r 0 kvm -l "+ours, "migrate-rbdfence")
			if strings.Join(p.Wrapped, ",") != tc.wrapped {
				t.Fatalf("wrapped %q, want %q", p.Wrapped, tc.wrapped)
			}
			if ok, detail := CoverageReport(p.New); !ok {
				t.Fatalf("after the plan, doctor says: %s", detail)
			}
			// Idempotent, and reversible for an edited file.
			if again := PlanOnedConf(p.New); string(again.New) != string(p.New) || len(again.Changed) != 0 {
				t.Fatalf("a second plan changed %v", again.Changed)
			}
			if back := RemoveOurActions(p.New); tc.kvm != tc.wantKVM && string(back) != confWith(tc.kvm, "-t 15 -r 0 kvm") {
				t.Fatalf("RemoveOurActions gave\n%s", back)
			}
		})
	}
}

func TestCoverageReport(t *testing.T) {
	for _, tc := range []struct {
		kvm, qemu string
		ok        bool
		want      string
	}{
		{"-t 15 -r 0 kvm -l " + ours, "-t 15 -r 0 kvm -l " + ours, true, `"kvm", "qemu"`},
		{"-t 15 -r 0 kvm -l " + ours, "-t 15 -r 0 kvm", false, `"qemu" (no rbdfence deploy, restore, migrate`},
		{"-t 15 -r 0 kvm -l " + ours + " -l save", "-t 15 -r 0 kvm -l " + ours, false, `"kvm" (no rbdfence`},
		{"-t 15 -r 0 kvm --loc=" + ours, "-t 15 -r 0 kvm -l" + ours, true, ""},
		{"-t 15 -r 0 kvm --l " + ours, "kvm -l", false, `"qemu" (ARGUMENTS do not parse`},
	} {
		ok, detail := CoverageReport([]byte(confWith(tc.kvm, tc.qemu)))
		if ok != tc.ok || !strings.Contains(detail, tc.want) {
			t.Errorf("%q / %q: %v %s", tc.kvm, tc.qemu, ok, detail)
		}
	}
}
