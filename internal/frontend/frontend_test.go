package frontend

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

func TestShellQuoteThroughShell(t *testing.T) {
	for _, s := range []string{"", "plain", "with space", "it's", `"double"`, "$(touch /tmp/x)", "`id`", "a\nb", `back\slash`, "*?[]{}~", "'", "''"} {
		out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if string(out) != s {
			t.Errorf("shellQuote(%q) came back as %q", s, out)
		}
	}
}

func TestCheckHost(t *testing.T) {
	for _, tc := range []struct {
		h  string
		ok bool
	}{
		{"node1", true}, {"node-1.example.com", true}, {"10.0.0.5", true}, {"2001:db8::1", true}, {"rbdf_a", true},
		{"", false}, {"-oProxyCommand=x", false}, {"a b", false}, {"a;b", false}, {"a\nb", false}, {"user@host", false},
		{strings.Repeat("a", 254), false},
	} {
		if err := checkHost("host", tc.h); (err == nil) != tc.ok {
			t.Errorf("checkHost(%q) = %v, want ok=%v", tc.h, err, tc.ok)
		}
	}
}

func TestSSHArgv(t *testing.T) {
	t.Setenv("SSH_OPT_CONTROL_MASTER", "")
	cfg := config.Default()
	cfg.OpenNebula.SSH = "ssh -F /etc/x/ssh_config"
	cfg.Timeouts.SSH = config.Duration(7 * time.Second)
	e := &Env{Cfg: cfg}
	got, err := e.sshArgv("node1", []string{"/var/tmp/one/rbdfence/rbdfence-host", "host", "--config", "/etc/one/it's.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	// ControlMaster=auto as OpenNebula's ssh wrapper adds it
	// (share/ssh/bin/ssh:98 of release-7.4.0): the persistent connection
	// of oneadmin's ssh config (ControlPath, ControlPersist) is shared.
	want := []string{"ssh", "-F", "/etc/x/ssh_config", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7", "-o", "ControlMaster=auto", "node1",
		`'/var/tmp/one/rbdfence/rbdfence-host' 'host' '--config' '/etc/one/it'"'"'s.yaml'`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	// A delegated action brings its own (no master: agent forwarding).
	got, _ = e.sshArgvOpts("node1", []string{"x"}, "-o", "ForwardAgent=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none")
	if strings.Contains(strings.Join(got, " "), "ControlMaster=auto") {
		t.Fatalf("ControlMaster=auto with a delegated action: %q", got)
	}
	// oned's environment may override the wrapper's default, as it does
	// for the drivers (share/ssh/bin/ssh:23-36 of release-7.4.0).
	t.Setenv("SSH_OPT_CONTROL_MASTER", "no")
	if got, _ = e.sshArgv("node1", []string{"x"}); !strings.Contains(strings.Join(got, " "), "-o ControlMaster=no node1") {
		t.Fatalf("SSH_OPT_CONTROL_MASTER=no not followed: %q", got)
	}
	t.Setenv("SSH_OPT_CONTROL_MASTER", "")
	// So does an admin's ssh command.
	e.Cfg.OpenNebula.SSH = "ssh -o ControlMaster=no"
	if got, _ = e.sshArgv("node1", []string{"x"}); strings.Contains(strings.Join(got, " "), "ControlMaster=auto") {
		t.Fatalf("ControlMaster=auto over the configured ssh command's: %q", got)
	}
	if _, err := e.sshArgv("-oProxyCommand=sh", []string{"x"}); err == nil {
		t.Fatal("an option as host name was accepted")
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func([]string) error
		args []string
		err  string
	}{
		{"deploy ok", func(a []string) error { _, err := ParseDeployArgs(a); return err }, []string{"/var/lib/one/vms/4/deployment.0", "n1", "4", "n1"}, ""},
		{"deploy 3 args", func(a []string) error { _, err := ParseDeployArgs(a); return err }, []string{"/var/lib/one/vms/4/deployment.0", "n1", "4"}, ""},
		{"deploy none", func(a []string) error { _, err := ParseDeployArgs(a); return err }, nil, "wrong number of arguments (0)"},
		{"deploy bad vm", func(a []string) error { _, err := ParseDeployArgs(a); return err }, []string{"/d", "n1", "x4", "n1"}, "VM id"},
		{"deploy negative vm", func(a []string) error { _, err := ParseDeployArgs(a); return err }, []string{"/d", "n1", "-4", "n1"}, "VM id"},
		{"deploy hosts differ", func(a []string) error { _, err := ParseDeployArgs(a); return err }, []string{"/d", "n1", "4", "n2"}, "differ"},
		{"deploy relative file", func(a []string) error { _, err := ParseDeployArgs(a); return err }, []string{"deployment.0", "n1", "4", "n1"}, "absolute"},
		{"deploy option host", func(a []string) error { _, err := ParseDeployArgs(a); return err }, []string{"/d", "-x", "4", "-x"}, "not a host name"},
		{"restore ok", func(a []string) error { _, err := ParseRestoreArgs(a); return err }, []string{"/var/lib/one/datastores/0/4/checkpoint", "n1", "uuid", "4", "n1"}, ""},
		{"restore short", func(a []string) error { _, err := ParseRestoreArgs(a); return err }, []string{"/c", "n1"}, "wrong number"},
		{"restore relative", func(a []string) error { _, err := ParseRestoreArgs(a); return err }, []string{"c", "n1", "u", "4", "n1"}, "absolute"},
		{"migrate ok", func(a []string) error { _, err := ParseVMMMigrateArgs(a); return err }, []string{"one-4", "n2", "n1", "4", "n1"}, ""},
		{"migrate 4 args", func(a []string) error { _, err := ParseVMMMigrateArgs(a); return err }, []string{"one-4", "n2", "n1", "4"}, ""},
		{"migrate short", func(a []string) error { _, err := ParseVMMMigrateArgs(a); return err }, []string{"one-4", "n2"}, "wrong number"},
		{"migrate sources differ", func(a []string) error { _, err := ParseVMMMigrateArgs(a); return err }, []string{"one-4", "n2", "n1", "4", "n3"}, "differ"},
		{"migrate bad dst", func(a []string) error { _, err := ParseVMMMigrateArgs(a); return err }, []string{"one-4", "n 2", "n1", "4", "n1"}, "destination host"},
		{"migrate empty deploy id", func(a []string) error { _, err := ParseVMMMigrateArgs(a); return err }, []string{"", "n2", "n1", "4", "n1"}, "deploy id"},
		{"prestart ok", func(a []string) error { _, err := ParsePrestartArgs(a); return err }, []string{"4"}, ""},
		{"prestart host", func(a []string) error { _, err := ParsePrestartArgs(a); return err }, []string{"4", "n1"}, ""},
		{"prestart none", func(a []string) error { _, err := ParsePrestartArgs(a); return err }, nil, "usage: prestart"},
		{"prestart bad", func(a []string) error { _, err := ParsePrestartArgs(a); return err }, []string{"four"}, "VM id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn(tc.args)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe, ok := err.(*Error)
			if !ok || fe.Kind != outcome.Usage || !strings.Contains(fe.Msg, tc.err) || strings.Contains(fe.Msg, "\n") {
				t.Fatalf("want a one-line usage error with %q, got %#v", tc.err, err)
			}
		})
	}
}

func TestDecodeBase64(t *testing.T) {
	enc := base64.StdEncoding.EncodeToString([]byte("<domain/>"))
	for _, tc := range []struct {
		in, want, err string
	}{
		{enc, "<domain/>", ""},
		{enc + "\n", "<domain/>", ""},
		{enc[:4] + "\n" + enc[4:], "<domain/>", ""},
		{"", "", "empty"},
		{" \n", "", "empty"},
		{"<domain/>", "", "not base64"},
		{enc[:len(enc)-1], "", "not base64"},
	} {
		got, err := DecodeBase64("x", []byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: want error %q, got %v", tc.in, tc.err, err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%q: got %q, %v", tc.in, got, err)
		}
	}
}

func TestXMLRoot(t *testing.T) {
	for _, tc := range []struct{ in, root, err string }{
		{`<?xml version="1.0"?><VMM_DRIVER_ACTION_DATA><HOST>n</HOST></VMM_DRIVER_ACTION_DATA>`, "VMM_DRIVER_ACTION_DATA", ""},
		{"<a/>\n", "a", ""},
		{"", "", "no root"},
		{"just text", "", "text outside"},
		{"<a><b></a>", "", "well-formed"},
		{"<a/><b/>", "", "more than one root"},
	} {
		root, err := xmlRoot([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: want error %q, got %v", tc.in, tc.err, err)
			}
			continue
		}
		if err != nil || root != tc.root {
			t.Errorf("%q: got %q, %v", tc.in, root, err)
		}
	}
}

func TestDeploySeq(t *testing.T) {
	for in, want := range map[string]int{
		"/var/lib/one/vms/4/deployment.0": 0, "/x/deployment.12": 12, "/x/deployment.": -1, "/x/deployment.-1": -1,
		"/x/deployment.07": -1, "/x/deploy.3": -1, "/x/deployment.3.tmp": -1,
	} {
		if got := deploySeq(in); got != want {
			t.Errorf("deploySeq(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestLogLines(t *testing.T) {
	var b bytes.Buffer
	l := NewLog(&b, -1)
	l.Info("no vm yet")
	l.SetVM(42)
	l.Info("fenced %s", "client.1\nsecond line")
	l.Error("bad")
	// The line names the VM and rbdfence: a nested message's are dropped.
	l.Error("%v; starting anyway", errorf(outcome.Unavailable, 42, "rbdfence could not check the start: VM 42: x"))
	l.Info("VM 42: VM 42: window open")
	l.Info("VM 420: another VM")
	want := "INFO: rbdfence: no vm yet\nINFO: 42 rbdfence: fenced client.1 second line\nERROR: 42 rbdfence: bad\n" +
		"ERROR: 42 rbdfence: could not check the start: VM 42: x; starting anyway\nINFO: 42 rbdfence: window open\nINFO: 42 rbdfence: VM 420: another VM\n"
	if b.String() != want {
		t.Fatalf("got %q\nwant %q", b.String(), want)
	}
}

// TestExitEveryKind: a driver exits with the code of its error's kind, for
// every kind of internal/outcome (a kind added there is covered here).
func TestExitEveryKind(t *testing.T) {
	for _, k := range outcome.All() {
		var err error
		if k != outcome.OK {
			err = errorf(k, 42, "rbdfence %s", k)
		}
		var stderr bytes.Buffer
		if got := Exit(err, &stderr); got != k.Code() {
			t.Errorf("%v: exit %d, want %d", k, got, k.Code())
		}
		if k != outcome.OK && stderr.String() != "rbdfence "+k.String()+"\n" {
			t.Errorf("%v: stderr %q", k, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if got := Exit(&ExitError{What: "deploy", Code: 7}, &stderr); got != 7 || stderr.Len() != 0 {
		t.Errorf("wrapped action: exit %d, stderr %q", got, stderr.String())
	}
}

func TestRunTimeoutKillsGroup(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "survivor")
	start := time.Now()
	// The child leaves a grandchild behind that would write marker later.
	_, err := run(context.Background(), proc{argv: []string{"sh", "-c", "(sleep 2; touch " + marker + ") & sleep 30"}, timeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("want a timeout, got %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s", took)
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a grandchild survived the timeout")
	}
}

func TestHostCommand(t *testing.T) {
	for _, tc := range []struct {
		cfgPath string
		want    string
	}{
		{config.DefaultPath, "/var/tmp/one/rbdfence/rbdfence-host|host"},
		{"/etc/one/other.yaml", "/var/tmp/one/rbdfence/rbdfence-host|host|--config|/etc/one/other.yaml"},
	} {
		cfg := config.Default()
		cfg.OpenNebula.HostConfig = tc.cfgPath
		cfg.OpenNebula.HostPackageBinary = ""
		if got := strings.Join((&Env{Cfg: cfg}).hostCommand(hoststep.OpCheck), "|"); got != tc.want {
			t.Errorf("host_config %s: %s, want %s", tc.cfgPath, got, tc.want)
		}
	}
}

func TestVMDirFile(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name, in, want, err string
	}{
		// As the driver writes them for a local deploy (base64 stdin of a
		// local step, OpenNebulaDriver.rb:103-104 of release-7.4.0).
		{"vm.xml", b64("<VM><ID>42</ID></VM>"), "<VM><ID>42</ID></VM>", ""},
		{"ds.xml", b64("<DATASTORE><ID>0</ID></DATASTORE>"), "<DATASTORE><ID>0</ID></DATASTORE>", ""},
		{"vm.xml", b64("<VM><ID>42</ID></VM>") + "\n", "<VM><ID>42</ID></VM>", ""},
		// Already XML, or empty: kept byte for byte.
		{"vm.xml", "<VM><ID>42</ID></VM>\n", "<VM><ID>42</ID></VM>\n", ""},
		{"ds.xml", "", "", ""},
		{"vm.xml", "PFZNPjxJRD40Mj", "", "neither XML nor base64"},
		{"vm.xml", b64("<DATASTORE/>"), "", "want <VM>"},
		{"ds.xml", b64("not xml"), "", "decoded from base64"},
	} {
		got, err := vmDirFile(tc.name, []byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %q: err %v, want %q", tc.name, tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s %q: got %q, %v; want %q", tc.name, tc.in, got, err, tc.want)
		}
	}
}

// TestWithVMDirFiles runs the one-session deploy command through a real
// shell: the files land byte for byte, then the deploy runs with its
// arguments and stdin.
func TestWithVMDirFiles(t *testing.T) {
	dir := t.TempDir()
	vmDir := filepath.Join(dir, "datastores", "0", "42")
	deploy := filepath.Join(dir, "deploy")
	if err := os.WriteFile(deploy, []byte("#!/bin/sh\nprintf '%s|' \"$@\"\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := []vmDirFileData{{"vm.xml", []byte("<VM><ID>42</ID><T><![CDATA[it's $(x) `y` \"z\" \\ %s]]></T></VM>\n")}, {"ds.xml", []byte("")}}
	argv := withVMDirFiles(vmDir, files, []string{deploy, vmDir + "/deployment.0", "node1", "42", "node1"})
	// As ssh hands the joined words to the remote shell.
	cmd := exec.Command("sh", "-c", shellJoin(argv))
	cmd.Stdin = strings.NewReader("<domain/>")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := vmDir + "/deployment.0|node1|42|node1|<domain/>"; string(out) != want {
		t.Fatalf("deploy saw %q, want %q", out, want)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(vmDir, f.name))
		if err != nil || string(got) != string(f.data) {
			t.Fatalf("%s: %q %v, want %q", f.name, got, err, f.data)
		}
	}
	if withVMDirFiles(vmDir, []vmDirFileData{{"vm.xml", bytes.Repeat([]byte("a"), maxInlineFiles+1)}}, []string{deploy}) != nil {
		t.Fatal("a file over the bound was inlined")
	}
}
