package frontend_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSSHMasterShared (issue 30 item 2): where the ssh config names no
// ControlPath (OpenNebula's drivers without the packages' multiplexing),
// the front-end's sessions to a host share a master connection of
// rbdfence's own: two deploys on one host open one ssh connection, counted
// by the host's sshd, where a connection per session opens two; the
// master is found in ~/.ssh/rbdfence and answers `ssh -O check`.
func TestSSHMasterShared(t *testing.T) {
	for _, tc := range []struct {
		persist string
		want    int // connections the host's sshd accepts for two deploys
	}{
		{"0s", 2},
		{"70s", 1},
	} {
		t.Run("ssh_persist "+tc.persist, func(t *testing.T) {
			f := setup(t)
			// A home whose socket path fits a socket address.
			home, err := os.MkdirTemp("", "h")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(home) })
			f.env = []string{"HOME=" + home}
			f.sshPersist = tc.persist
			f.writeConfig()
			a := f.hs.A
			log := filepath.Join(filepath.Dir(f.hs.SSHConfig), a.Name, "sshd.log")
			before := accepted(t, log)
			for i := 0; i < 2; i++ {
				vm, specs := f.newVM(a.Name, 0, "persistent")
				if r := f.deployVM(vm, 0, a.Name, specs); r.code != 0 {
					t.Fatalf("deploy %d: exit %d\n%s", i, r.code, r.stderr)
				}
			}
			dir := filepath.Join(home, ".ssh", "rbdfence")
			socks, _ := filepath.Glob(filepath.Join(dir, "*"))
			t.Cleanup(func() {
				for _, s := range socks {
					_ = exec.Command("ssh", "-F", f.hs.SSHConfig, "-o", "ControlPath="+s, "-O", "exit", a.Name).Run()
				}
			})
			if got := accepted(t, log) - before; got != tc.want {
				t.Fatalf("two deploys opened %d ssh connections to %s, want %d (sockets %q)", got, a.Name, tc.want, socks)
			}
			if tc.want == 1 {
				if len(socks) != 1 {
					t.Fatalf("control sockets %q, want one", socks)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if out, err := exec.CommandContext(ctx, "ssh", "-F", f.hs.SSHConfig, "-o", "ControlPath="+socks[0], "-O", "check", a.Name).CombinedOutput(); err != nil {
					t.Fatalf("ssh -O check: %v %s", err, out)
				}
			} else if len(socks) != 0 {
				t.Fatalf("ssh_persist 0s left control sockets %q", socks)
			}
		})
	}
}

// accepted counts the connections log (a host's sshd log) accepted.
func accepted(t *testing.T, log string) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "Accepted publickey")
}
