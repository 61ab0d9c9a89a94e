package frontend

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// TestWarmSSH: the state hook opens rbdfence's own master (ssh with the
// master's options, running `true`) to the VM's host on PROLOG, to both
// hosts of a live migration on MIGRATE, only where rbdfence would open one,
// and says plainly why it opened nothing.
func TestWarmSSH(t *testing.T) {
	// A stand-in ssh: -G prints $G_OUT; -O check says whether $MASTER.<host>
	// exists; otherwise it logs its argv and exits $SSH_RC (0 makes the
	// master).
	fake := standInSSH(t, "last=; prev=; for a; do prev=$last; last=$a; done\n"+
		"for a; do [ \"$a\" = -G ] && { printf '%b' \"$G_OUT\"; exit 0; }; [ \"$a\" = check ] && { [ -e \"$MASTER.$last\" ] || exit 255; echo 'Master running (pid=4242)' >&2; exit 0; }; done\n"+
		"echo \"$@\" >> \"$SSH_LOG\"\n[ \"${SSH_RC:-0}\" = 0 ] && : > \"$MASTER.$prev\"\n"+
		"[ \"${SSH_RC:-0}\" = 0 ] || echo \"ssh: connect to host $prev port 22: Connection refused\" >&2\nexit ${SSH_RC:-0}\n")
	plain := "user oneadmin\\nhostname node1\\n"
	vmXML := func(lcm, history string) string {
		return base64.StdEncoding.EncodeToString([]byte("<VM><ID>7</ID><NAME>v</NAME><STATE>3</STATE><LCM_STATE>" + lcm + "</LCM_STATE><HISTORY_RECORDS>" + history + "</HISTORY_RECORDS></VM>"))
	}
	rec := func(seq, host string) string {
		return "<HISTORY><SEQ>" + seq + "</SEQ><HOSTNAME>" + host + "</HOSTNAME><HID>0</HID><DS_ID>0</DS_ID></HISTORY>"
	}
	onNode1 := vmXML("1", rec("0", "node1"))                     // PROLOG
	migrating := vmXML("4", rec("0", "node2")+rec("1", "node1")) // MIGRATE node2 -> node1
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		gOut  string
		cm    string   // SSH_OPT_CONTROL_MASTER
		rc    string   // the ssh's exit code
		open  []string // the hosts whose master runs before
		want  []string // the hosts ssh'd to with rbdfence's master options
		kind  outcome.Kind
		msg   string
		both  bool // each host's failure is said: one as the error, the other logged
	}{
		{name: "no master in the config", stdin: onNode1, gOut: plain, want: []string{"node1"}, msg: "ssh master to node1 opened for the action (pid 4242, kept 1m10s)"},
		{name: "master already open", stdin: onNode1, gOut: plain, open: []string{"node1"}, msg: "already open (pid 4242)"},
		{name: "the packages' ControlPath", stdin: onNode1, gOut: plain + "controlpath /run/one/ssh-socks/ctl-M-abc.sock\\n"},
		{name: "oned says no master", stdin: onNode1, gOut: plain, cm: "no"},
		{name: "ssh fails", stdin: onNode1, gOut: plain, rc: "255", want: []string{"node1"}, kind: outcome.Unavailable, msg: "ssh exited 255: ssh: connect to host node1 port 22: Connection refused"},
		{name: "live migration: both hosts", stdin: migrating, gOut: plain, want: []string{"node1", "node2"}, msg: "ssh master to node2 opened for the action"},
		{name: "live migration: the source's open", stdin: migrating, gOut: plain, open: []string{"node2"}, want: []string{"node1"}, msg: "ssh master to node2 already open"},
		{name: "live migration: both fail", stdin: migrating, gOut: plain, rc: "255", want: []string{"node1", "node2"}, kind: outcome.Unavailable, msg: "not opened", both: true},
		{name: "live migration to its own host", stdin: vmXML("4", rec("0", "node1")+rec("1", "node1")), gOut: plain, want: []string{"node1"}, msg: "node1 opened"},
		{name: "PROLOG of a VM placed before", stdin: vmXML("1", rec("0", "node2")+rec("1", "node1")), gOut: plain, want: []string{"node1"}, msg: "node1 opened"},
		{name: "live migration from a bad name", stdin: vmXML("4", rec("0", "-oProxyCommand=x")+rec("1", "node1")), gOut: plain, kind: outcome.Usage, msg: "no ssh connection opened"},
		{name: "no history", stdin: vmXML("1", ""), gOut: plain, kind: outcome.Usage, msg: "no HISTORY record"},
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
			for _, h := range tc.open {
				if err := os.WriteFile(master+"."+h, nil, 0o600); err != nil {
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
			if said := fmt.Sprint(err) + stderr.String(); tc.both && (!strings.Contains(said, "ssh master to node1 not opened") || !strings.Contains(said, "ssh master to node2 not opened")) {
				t.Fatalf("both hosts failed, but not both are said: error %v, log %q", err, stderr.String())
			}
			b, _ := os.ReadFile(log)
			opts := "-o ControlPath=" + filepath.Join(home, ".ssh", "rbdfence", "%C") + " -o ControlPersist=70"
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l == "" {
					continue
				}
				f := strings.Fields(l)
				if !strings.Contains(l, opts) || len(f) < 2 || f[len(f)-1] != "'true'" {
					t.Fatalf("ssh ran without rbdfence's master options or not `true`: %q", l)
				}
				got = append(got, f[len(f)-2])
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ssh opened masters to %q, want %q; ssh ran: %q", got, tc.want, b)
			}
		})
	}
}
