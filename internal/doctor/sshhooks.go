package doctor

import (
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/frontend"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// The ssh hooks (README: ssh without multiplexing, optional): where the
// front-end's ssh to a host rides a master of rbdfence's own, oned state
// hooks open it while PROLOG copies the disks and while a live migration's
// tm premigrate runs, and the action finds it open. The check says which
// oned has, and whether they do anything here.

// sshHook is one of the state hooks sshwarm-rbdfence runs as.
type sshHook struct {
	when string // what it opens the masters for
	file string // its template, as install.sh frontend and the packages install it
	// on says whether a hook's condition is this one's.
	on func(h opennebula.Hook) bool
}

// sshHooks are packaging/files/prolog_ssh.hook and migrate_ssh.hook. oned
// keeps a state hook's condition as STATE and LCM_STATE, ON = PROLOG too
// (it drops ON: HookStateVM.cc:79-145 of release-7.4.0 and 6.10.5).
var sshHooks = []sshHook{
	{"PROLOG", "var/lib/one/remotes/hooks/rbdfence/prolog_ssh.hook", onState("PROLOG")},
	{"MIGRATE", "var/lib/one/remotes/hooks/rbdfence/migrate_ssh.hook", onState("MIGRATE")},
}

// onState is the condition of a state hook on the VM's LCM state lcm.
func onState(lcm string) func(h opennebula.Hook) bool {
	return func(h opennebula.Hook) bool {
		return strings.EqualFold(h.State, "ACTIVE") && strings.EqualFold(h.LCMState, lcm)
	}
}

// sshHookCommand is their COMMAND's file name.
const sshHookCommand = "sshwarm-rbdfence"

// checkSSHHooks lists oned's hooks, and asks the ssh config (ssh -G, as an
// action does) which of the KVM hosts (kvmHosts; none when oned could not
// list them: the hosts check says why) an action reaches over a master of
// rbdfence's own.
func checkSSHHooks(ctx context.Context, root string, cfg *config.Config, names []string) Result {
	c, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	var hooks []opennebula.Hook
	if err == nil {
		hooks, err = c.Hooks(ctx)
	}
	if err != nil {
		return Result{Check: "ssh-hooks", Detail: "cannot list oned's hooks: " + oneLine(err.Error()), Fix: "see the oned check"}
	}
	e := &frontend.Env{Cfg: cfg, Stdout: io.Discard, Stderr: io.Discard, Log: frontend.NewLog(io.Discard, -1)}
	var own []string
	for _, h := range names {
		if e.OwnMaster(h) {
			own = append(own, h)
		}
	}
	if root == "" {
		root = "/"
	}
	return sshHooksResult(hooks, len(names), own, root)
}

// sshHooksResult judges the hook pool: hosts KVM hosts were listed, own of
// them an action reaches over rbdfence's own master; root is where the
// templates are installed.
func sshHooksResult(hooks []opennebula.Hook, hosts int, own []string, root string) Result {
	r := Result{Check: "ssh-hooks", OK: true}
	found := make([]*opennebula.Hook, len(sshHooks))
	for i := range hooks {
		h := &hooks[i]
		if path.Base(h.Command) != sshHookCommand {
			continue
		}
		matched := false
		for j, w := range sshHooks {
			if strings.EqualFold(h.Type, "state") && w.on(*h) && found[j] == nil {
				found[j], matched = h, true
				break
			}
		}
		if !matched {
			cond := h.State + "/" + h.LCMState
			return Result{Check: "ssh-hooks",
				Detail: fmt.Sprintf("hook %d (%s) runs %s as a %s hook on %q, neither PROLOG nor a live migration's MIGRATE (or a second one of them): it opens no master before an action", h.ID, h.Name, h.Command, orNone(h.Type), cond),
				Fix:    fmt.Sprintf("run 'onehook delete %d' as oneadmin, and 'onehook create' the templates %s and %s that are not created", h.ID, filepath.Join(root, sshHooks[0].file), filepath.Join(root, sshHooks[1].file))}
		}
	}
	var have, missing []string
	for j, w := range sshHooks {
		if h := found[j]; h != nil {
			have = append(have, fmt.Sprintf("hook %d (%s) on %s", h.ID, h.Name, w.when))
		} else {
			missing = append(missing, filepath.Join(root, w.file))
		}
	}
	var parts []string
	switch len(have) {
	case 0:
		parts = append(parts, "none created")
	case 1:
		parts = append(parts, have[0]+" opens rbdfence's ssh masters before the action")
	default:
		parts = append(parts, strings.Join(have, " and ")+" open rbdfence's ssh masters before the action")
	}
	switch {
	case hosts > 0 && len(own) == 0:
		parts = append(parts, "none is needed here: the ssh config multiplexes (ControlPath) for every KVM host")
	case len(missing) == 0:
	case hosts == 0:
		parts = append(parts, "optional, not created: "+strings.Join(missing, ", ")+" (no KVM host to judge them by)")
	default:
		parts = append(parts, fmt.Sprintf("optional, not created: %s (without them an action to %s opens an ssh connection of its own unless one of rbdfence's is open; 'onehook create FILE' as oneadmin creates one)", strings.Join(missing, ", "), hostList(own)))
	}
	r.Detail = strings.Join(parts, "; ")
	return r
}

// hostList names up to three hosts and how many more.
func hostList(hs []string) string {
	if len(hs) <= 3 {
		return strings.Join(hs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(hs[:3], ", "), len(hs)-3)
}
