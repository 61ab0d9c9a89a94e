package frontend

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
)

// control gives rbdfence's ssh a master connection of its own where the
// user's ssh config has none, so that an action's sessions and the next
// actions to the same host within opennebula.ssh_persist share one
// connection instead of opening one each (a new connection costs a TCP
// and ssh handshake and key exchange: 229-284 ms on the test stack,
// docs/PERFORMANCE.md). Where oneadmin's config names a ControlPath (the
// packages' share/ssh/etc/config:26-28 of release-7.4.0) that one is kept:
// the drivers' own master then carries our sessions.
//
// The master daemonizes (its own session, stdio on /dev/null), so it
// outlives the action by design, for ssh_persist at most; it sends a
// keepalive every 5 s and gives up after 3 unanswered ones, so a session
// to a host that died is refused within about 15 s and the next one
// connects afresh.
type control struct {
	mu   sync.Mutex
	seen map[string][]string // host -> options ("" entries none)
}

// opts returns the ssh options that give host's connection rbdfence's own
// master, or none: ssh_persist is 0, the config names a ControlPath (ssh
// -G), ssh -G fails (not OpenSSH: nothing added) or the directory is not
// safely ours.
func (c *control) opts(cfg *config.Config, host string) []string {
	persist := int(time.Duration(cfg.OpenNebula.SSHPersist) / time.Second)
	if persist < 1 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.seen[host]; ok {
		return o
	}
	if c.seen == nil {
		c.seen = map[string][]string{}
	}
	var o []string
	if dir := controlDir(); dir != "" && !configHasControlPath(cfg.OpenNebula.SSH, host) {
		o = []string{"-o", "ControlPath=" + filepath.Join(dir, "%C"), "-o", "ControlPersist=" + strconv.Itoa(persist),
			"-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"}
	}
	c.seen[host] = o
	return o
}

// configHasControlPath says whether the effective ssh config for host
// (ssh -G: options given in the ssh command line, then ~/.ssh/config and
// /etc/ssh/ssh_config) names a ControlPath. An ssh that cannot say counts
// as yes: nothing of ours is added to it.
func configHasControlPath(sshCmd, host string) bool {
	argv := strings.Fields(sshCmd)
	if len(argv) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], append(argv[1:], "-G", host)...).Output()
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "controlpath" && v != "none" {
			return true
		}
	}
	return false
}

// controlDir is ~/.ssh/rbdfence (oneadmin's: /var/lib/one/.ssh/rbdfence),
// made 0700 when absent, or "" when it is not a directory of this user's
// that no one else can enter (a control socket runs commands as the user
// on the host). Its path plus a 40-character %C and ssh's temporary
// suffix must fit a socket address (108 bytes).
func controlDir() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	dir := filepath.Join(home, ".ssh", "rbdfence")
	if len(dir)+1+40+17 >= 108 {
		return ""
	}
	_ = os.MkdirAll(dir, 0o700)
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return ""
	}
	return dir
}
