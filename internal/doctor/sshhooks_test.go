package doctor

import (
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/opennebula"
)

func TestSSHHooksResult(t *testing.T) {
	const prolog, migrate = "/r/var/lib/one/remotes/hooks/rbdfence/prolog_ssh.hook", "/r/var/lib/one/remotes/hooks/rbdfence/migrate_ssh.hook"
	// As oned keeps them: no ON, its condition in STATE and LCM_STATE.
	pro := opennebula.Hook{ID: 3, Name: "prolog_ssh_rbdfence", Type: "state", Command: "rbdfence/sshwarm-rbdfence", State: "ACTIVE", LCMState: "PROLOG"}
	mig := opennebula.Hook{ID: 4, Name: "migrate_ssh_rbdfence", Type: "state", Command: "rbdfence/sshwarm-rbdfence", State: "ACTIVE", LCMState: "MIGRATE"}
	other := opennebula.Hook{ID: 0, Name: "host_error", Type: "state", Command: "ft/host_error.rb", State: "ERROR"}
	late := pro
	late.ID, late.LCMState = 7, "RUNNING"
	wrongLCM := mig
	wrongLCM.ID, wrongLCM.LCMState = 8, "SAVE_MIGRATE"
	api := pro
	api.ID, api.Type, api.State, api.LCMState = 9, "api", "", ""
	lower := opennebula.Hook{ID: 5, Name: "p", Type: "STATE", Command: "/var/lib/one/remotes/hooks/rbdfence/sshwarm-rbdfence", State: "active", LCMState: "prolog"}
	twice := pro
	twice.ID = 6
	for _, tc := range []struct {
		name   string
		hooks  []opennebula.Hook
		hosts  int
		own    []string
		ok     bool
		detail string // the whole detail; for a failure a part of it
		fix    string
	}{
		{"both, hosts without multiplexing", []opennebula.Hook{other, mig, pro}, 2, []string{"kvm1", "kvm2"}, true,
			"hook 3 (prolog_ssh_rbdfence) on PROLOG and hook 4 (migrate_ssh_rbdfence) on MIGRATE open rbdfence's ssh masters before the action", ""},
		{"both, every host multiplexed", []opennebula.Hook{pro, mig}, 2, nil, true,
			"hook 3 (prolog_ssh_rbdfence) on PROLOG and hook 4 (migrate_ssh_rbdfence) on MIGRATE open rbdfence's ssh masters before the action; none is needed here: the ssh config multiplexes (ControlPath) for every KVM host", ""},
		{"PROLOG only, lower case from onehook update", []opennebula.Hook{lower}, 1, []string{"kvm1"}, true,
			"hook 5 (p) on PROLOG opens rbdfence's ssh masters before the action; optional, not created: " + migrate + " (without them an action to kvm1 opens an ssh connection of its own unless one of rbdfence's is open; 'onehook create FILE' as oneadmin creates one)", ""},
		{"none, hosts without multiplexing", []opennebula.Hook{other}, 5, []string{"a", "b", "c", "d"}, true,
			"none created; optional, not created: " + prolog + ", " + migrate + " (without them an action to a, b, c and 1 more opens an ssh connection of its own unless one of rbdfence's is open; 'onehook create FILE' as oneadmin creates one)", ""},
		{"none, multiplexed", nil, 2, nil, true, "none created; none is needed here: the ssh config multiplexes (ControlPath) for every KVM host", ""},
		{"none, no host", nil, 0, nil, true, "none created; optional, not created: " + prolog + ", " + migrate + " (no KVM host to judge them by)", ""},
		{"on the wrong state", []opennebula.Hook{late, mig}, 1, []string{"kvm1"}, false,
			`hook 7 (prolog_ssh_rbdfence) runs rbdfence/sshwarm-rbdfence as a state hook on "ACTIVE/RUNNING", neither PROLOG nor`,
			"run 'onehook delete 7' as oneadmin, and 'onehook create' the templates " + prolog + " and " + migrate + " that are not created"},
		{"a custom state that is not the live migration", []opennebula.Hook{wrongLCM}, 1, []string{"kvm1"}, false, `on "ACTIVE/SAVE_MIGRATE"`, "onehook delete 8"},
		{"an api hook", []opennebula.Hook{api}, 1, []string{"kvm1"}, false, `as a api hook on "/"`, "onehook delete 9"},
		{"PROLOG twice", []opennebula.Hook{pro, twice}, 1, []string{"kvm1"}, false, "hook 6 (prolog_ssh_rbdfence)", "onehook delete 6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sshHooksResult(tc.hooks, tc.hosts, tc.own, "/r")
			good := r.Detail == tc.detail || !tc.ok && strings.Contains(r.Detail, tc.detail)
			if r.Check != "ssh-hooks" || r.OK != tc.ok || !good || !strings.Contains(r.Fix, tc.fix) || (tc.ok && r.Fix != "") {
				t.Fatalf("got %+v\nwant ok %v, detail %q, fix with %q", r, tc.ok, tc.detail, tc.fix)
			}
		})
	}
}
