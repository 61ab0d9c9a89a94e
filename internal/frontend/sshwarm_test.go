package frontend

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// TestWarmSSH: the PROLOG hook opens rbdfence's own master to the VM's host
// (ssh with the master's options, running `true`) only where rbdfence
// would open one, and says plainly why it opened nothing.
func TestWarmSSH(t *testing.T) {
	// A stand-in ssh: -G prints $G_OUT; -O check says whether $MASTER
	// exists; otherwise it logs its argv and exits $SSH_RC (0 makes the
	// master).
	fake := standInSSH(t, "for a; do [ \"$a\" = -G ] && { printf '%b' \"$G_OUT\"; exit 0; }; [ \"$a\" = check ] && { [ -e \"$MASTER\" ] || exit 255; echo 'Master running (pid=4242)' >&2; exit 0; }; done\necho \"$@\" >> \"$SSH_LOG\"\n[ \"${SSH_RC:-0}\" = 0 ] && : > \"$MASTER\"\n[ \"${SSH_RC:-0}\" = 0 ] || echo 'ssh: connect to host node1 port 22: Connection refused' >&2\nexit ${SSH_RC:-0}\n")
	plain := "user oneadmin\\nhostname node1\\n"
	vmXML := func(history string) string {
		return base64.StdEncoding.EncodeToString([]byte("<VM><ID>7</ID><NAME>v</NAME><STATE>3</STATE><LCM_STATE>1</LCM_STATE><HISTORY_RECORDS>" + history + "</HISTORY_RECORDS></VM>"))
	}
	onNode1 := vmXML("<HISTORY><SEQ>0</SEQ><HOSTNAME>node1</HOSTNAME><HID>0</HID><DS_ID>0</DS_ID></HISTORY>")
	for _, tc := range []struct {
		name    string
		stdin   string
		args    []string
		gOut    string
		cm      string // SSH_OPT_CONTROL_MASTER
		rc      string // the ssh's exit code
		open    bool   // the master runs before
		wantSSH bool   // an ssh to node1 with rbdfence's master options
		kind    outcome.Kind
		msg     string
	}{
		{name: "no master in the config", stdin: onNode1, gOut: plain, wantSSH: true, msg: "opened for the deploy (pid 4242, kept 1m10s)"},
		{name: "master already open", stdin: onNode1, gOut: plain, open: true, msg: "already open (pid 4242)"},
		{name: "the packages' ControlPath", stdin: onNode1, gOut: plain + "controlpath /run/one/ssh-socks/ctl-M-abc.sock\\n"},
		{name: "oned says no master", stdin: onNode1, gOut: plain, cm: "no"},
		{name: "ssh fails", stdin: onNode1, gOut: plain, rc: "255", wantSSH: true, kind: outcome.Unavailable, msg: "ssh exited 255: ssh: connect to host node1 port 22: Connection refused"},
		{name: "no history", stdin: vmXML(""), gOut: plain, kind: outcome.Usage, msg: "no HISTORY record"},
		{name: "not base64", stdin: "<VM/>", gOut: plain, kind: outcome.Usage, msg: "base64"},
		{name: "an argument", stdin: onNode1, args: []string{"7"}, gOut: plain, kind: outcome.Usage, msg: "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := shortHome(t)
			log := filepath.Join(t.TempDir(), "ssh.log")
			t.Setenv("HOME", home)
			t.Setenv("G_OUT", tc.gOut)
			t.Setenv("SSH_LOG", log)
			t.Setenv("SSH_RC", tc.rc)
			t.Setenv("SSH_OPT_CONTROL_MASTER", tc.cm)
			master := filepath.Join(t.TempDir(), "master")
			t.Setenv("MASTER", master)
			if tc.open {
				if err := os.WriteFile(master, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := config.Default()
			cfg.OpenNebula.SSH = fake
			var stderr strings.Builder
			e := &Env{Cfg: cfg, Stderr: &stderr, Log: NewLog(&stderr, -1)}
			err := WarmSSH(context.Background(), e, tc.args, strings.NewReader(tc.stdin))
			if got := outcome.Of(err); got != tc.kind {
				t.Fatalf("outcome %v (%v), want %v", got, err, tc.kind)
			}
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q, want %q in it", err, tc.msg)
			}
			if err == nil && !strings.Contains(stderr.String(), tc.msg) {
				t.Fatalf("log %q, want %q in it", stderr.String(), tc.msg)
			}
			b, _ := os.ReadFile(log)
			want := "-o ControlPath=" + filepath.Join(home, ".ssh", "rbdfence", "%C") + " -o ControlPersist=70"
			if got := strings.Contains(string(b), want) && strings.HasSuffix(strings.TrimSpace(string(b)), "node1 'true'"); got != tc.wantSSH {
				t.Fatalf("ssh with rbdfence's master to node1 %v, want %v; ssh ran: %q", got, tc.wantSSH, b)
			}
			if !tc.wantSSH && len(b) > 0 {
				t.Fatalf("ssh ran where nothing was to be opened: %q", b)
			}
		})
	}
}
