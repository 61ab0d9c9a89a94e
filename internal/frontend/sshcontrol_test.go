package frontend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
)

// TestSSHOwnMaster: rbdfence's ssh gets a master connection of its own
// only where the user's ssh config names no ControlPath, and never over a
// delegated action's, an admin's or oned's ControlMaster choice.
func TestSSHOwnMaster(t *testing.T) {
	// A stand-in ssh: -G prints $G_OUT (exit $G_RC); the effective config
	// is what a test case says it is.
	fake := standInSSH(t, "for a; do [ \"$a\" = -G ] && { printf '%b' \"$G_OUT\"; exit ${G_RC:-0}; }; done\nexit 99\n")
	plain := "user root\\nhostname node1\\ncontrolmaster false\\ncontrolpersist no\\n"
	for _, tc := range []struct {
		name    string
		gOut    string
		gRC     string
		persist time.Duration
		cm      string   // SSH_OPT_CONTROL_MASTER
		opts    []string // the caller's own options
		home    func(t *testing.T) string
		want    bool // own ControlPath added
	}{
		{name: "no ControlPath in the config", gOut: plain, want: true},
		{name: "oneadmin's packaged config", gOut: plain + "controlpath /run/one/ssh-socks/ctl-M-abc.sock\\n"},
		{name: "ControlPath none", gOut: plain + "controlpath none\\n", want: true},
		{name: "ssh -G fails", gOut: "", gRC: "255"},
		{name: "ssh_persist 0", gOut: plain, persist: -1},
		{name: "oned says no master", gOut: plain, cm: "no"},
		{name: "delegated action", gOut: plain, opts: []string{"-o", "ControlMaster=no", "-o", "ControlPath=none"}},
		{name: "directory others can enter", gOut: plain, home: func(t *testing.T) string {
			h := shortHome(t)
			if err := os.MkdirAll(filepath.Join(h, ".ssh", "rbdfence"), 0o755); err != nil {
				t.Fatal(err)
			}
			return h
		}},
		{name: "directory is a symlink", gOut: plain, home: func(t *testing.T) string {
			h := shortHome(t)
			if err := os.MkdirAll(filepath.Join(h, ".ssh"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(t.TempDir(), filepath.Join(h, ".ssh", "rbdfence")); err != nil {
				t.Fatal(err)
			}
			return h
		}},
		{name: "home too long for a socket", gOut: plain, home: func(t *testing.T) string { return "/" + strings.Repeat("h", 60) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := shortHome(t)
			if tc.home != nil {
				home = tc.home(t)
			}
			t.Setenv("HOME", home)
			t.Setenv("G_OUT", tc.gOut)
			t.Setenv("G_RC", tc.gRC)
			t.Setenv("SSH_OPT_CONTROL_MASTER", tc.cm)
			cfg := config.Default()
			cfg.OpenNebula.SSH = fake
			switch {
			case tc.persist < 0:
				cfg.OpenNebula.SSHPersist = 0
			case tc.persist > 0:
				cfg.OpenNebula.SSHPersist = config.Duration(tc.persist)
			}
			e := &Env{Cfg: cfg}
			for i := 0; i < 2; i++ { // the second from the cache
				got, err := e.sshArgvOpts("node1", []string{"x"}, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				line := strings.Join(got, " ")
				ctl := "-o ControlPath=" + filepath.Join(home, ".ssh", "rbdfence", "%C") + " -o ControlPersist=70 -o ServerAliveInterval=5 -o ServerAliveCountMax=3 node1"
				if has := strings.Contains(line, ctl); has != tc.want {
					t.Fatalf("own master %v, want %v: %q", has, tc.want, got)
				}
				if !tc.want && strings.Contains(line, "rbdfence/%C") {
					t.Fatalf("own ControlPath where none belongs: %q", got)
				}
			}
			if tc.want {
				fi, err := os.Stat(filepath.Join(home, ".ssh", "rbdfence"))
				if err != nil || fi.Mode().Perm() != 0o700 {
					t.Fatalf("control directory %v, %v; want 0700", fi, err)
				}
			}
		})
	}
}

// standInSSH writes a stand-in ssh, the shell script body, and returns its path.
func standInSSH(t *testing.T, body string) string {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "ssh")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return fake
}

// shortHome is a home directory whose control socket path fits a socket
// address (t.TempDir's names are too long for one).
func shortHome(t *testing.T) string {
	t.Helper()
	h, err := os.MkdirTemp("", "h")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(h) })
	return h
}

// TestProbeSSH: probeSSH probes each host once, without waiting for the
// probe, and the sessions that follow take its answer (no second probe);
// where sshArgv would not ask, it probes nothing.
func TestProbeSSH(t *testing.T) {
	// A stand-in ssh whose -G waits for $G_GATE, then logs one line.
	fake := standInSSH(t, "for a; do [ \"$a\" = -G ] && { while [ ! -e \"$G_GATE\" ]; do sleep 0.01; done; echo \"$@\" >> \"$G_LOG\"; echo 'user oneadmin'; exit 0; }; done\nexit 99\n")
	for _, tc := range []struct {
		name  string
		ssh   string // opennebula.ssh after the fake's path
		cm    string // SSH_OPT_CONTROL_MASTER
		hosts []string
		want  []string // probed
	}{
		{name: "one host", hosts: []string{"node1"}, want: []string{"node1"}},
		{name: "a migration's two hosts", hosts: []string{"node2", "node1"}, want: []string{"node2", "node1"}},
		{name: "the same host twice", hosts: []string{"node1", "node1"}, want: []string{"node1"}},
		{name: "oned says no master", cm: "no", hosts: []string{"node1"}},
		{name: "ControlMaster in opennebula.ssh", ssh: " -o ControlMaster=no", hosts: []string{"node1"}},
		{name: "a bad host name", hosts: []string{"-oProxyCommand=x", "node1"}, want: []string{"node1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log, gate := filepath.Join(dir, "probes"), filepath.Join(dir, "gate")
			t.Setenv("HOME", shortHome(t))
			t.Setenv("G_LOG", log)
			t.Setenv("G_GATE", gate)
			t.Setenv("SSH_OPT_CONTROL_MASTER", tc.cm)
			cfg := config.Default()
			cfg.OpenNebula.SSH = fake + tc.ssh
			e := &Env{Cfg: cfg}
			if got := e.probeHosts(tc.hosts); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("probes %q, want %q", got, tc.want)
			}
			returned := make(chan struct{})
			go func() { e.probeSSH(tc.hosts...); close(returned) }()
			select {
			case <-returned: // while every probe waits for the gate
			case <-time.After(10 * time.Second):
				t.Fatal("probeSSH waits for its probes")
			}
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, h := range tc.want {
				if _, err := e.sshArgv(h, []string{"x"}); err != nil { // waits for the probe, asks none
					t.Fatal(err)
				}
			}
			b, _ := os.ReadFile(log)
			if got := strings.Count(string(b), "\n"); got != len(tc.want) {
				t.Fatalf("%d probes, want %d:\n%s", got, len(tc.want), b)
			}
		})
	}
}
