package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// fakeHostBinary is a stand-in for `rbdfence host` in TestSessionCommand:
// framed, it reads its request exactly (dd one byte at a time, as the real
// binary reads without reading ahead), says something on stderr, and
// answers framed with the response in $dir/answer and the exit code in
// $dir/code; detached, it keeps its stdin (the record request) in
// $dir/record.
const fakeHostBinary = `#!/bin/sh
dir=$(dirname "$0")
echo "$@" >> "$dir/argv"
case " $* " in
*" --detached "*) cat > "$dir/record.tmp"; mv "$dir/record.tmp" "$dir/record"; exit 0 ;;
esac
read -r tag n
[ "$tag" = rbdfence-step-request ] || { echo "bad header $tag" >&2; exit 2; }
dd bs=1 count="$n" of="$dir/request" 2>/dev/null
echo "host step diagnostics" >&2
a=$(cat "$dir/answer")
printf 'rbdfence-step-response %d\n%s' "${#a}" "$a"
exit $(cat "$dir/code")
`

// TestSessionCommand runs oneSession's remote command through a real
// shell, as ssh hands it to the host: the step reads its framed request
// and leaves the domain XML for the deploy byte for byte; an admitted start
// writes vm.xml and ds.xml, runs the deploy (whose output alone follows the
// frame) and starts the record in the background; a refusal keeps its exit
// code and runs nothing else; shell metacharacters in the data stay data.
func TestSessionCommand(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answer     string
		code       int
		deployFail bool
		pkg        bool // the package binary is installed (and the synced one is not)
		// noGo: the front-end gave up before the answer reached it, and
		// closes the session without GoLine (issue 18 item 13).
		noGo       bool
		wantCode   int
		wantDeploy bool
		wantRecord bool
	}{
		{name: "admitted", answer: `{"op":"start","ok":true,"version":4}`, wantDeploy: true, wantRecord: true},
		{name: "admitted, package binary", pkg: true, answer: `{"op":"start","ok":true,"version":4}`, wantDeploy: true, wantRecord: true},
		{name: "admitted, but the front-end stopped waiting", answer: `{"op":"start","ok":true,"version":4}`, noGo: true, wantCode: 1},
		{name: "refused", answer: `{"op":"start","ok":false,"kind":"refused","error":"claimed by host b","version":4}`, code: 4, wantCode: 4},
		{name: "deploy fails", answer: `{"op":"start","ok":true,"version":4}`, deployFail: true, wantCode: 255, wantDeploy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "rbdfence-host")
			write := func(p, s string, mode os.FileMode) {
				if err := os.WriteFile(p, []byte(s), mode); err != nil {
					t.Fatal(err)
				}
			}
			write(bin, fakeHostBinary, 0o755)
			write(filepath.Join(dir, "answer"), tc.answer, 0o644)
			write(filepath.Join(dir, "code"), strconv.Itoa(tc.code), 0o644)
			deploy := filepath.Join(dir, "deploy")
			fail := ""
			if tc.deployFail {
				fail = "echo 'Could not create domain' >&2; exit 255\n"
			}
			write(deploy, "#!/bin/sh\nprintf '%s|' \"$@\" > \""+dir+"/deploy.args\"\ncat > \""+dir+"/deploy.stdin\"\n"+fail+"echo one-42\n", 0o755)

			vmDir := filepath.Join(dir, "datastores", "0", "42")
			files := []vmDirFileData{{"vm.xml", []byte("<VM><T><![CDATA[it's $(x) `y` \"z\" \\ %s]]></T></VM>")}, {"ds.xml", []byte("<DATASTORE/>")}}
			domain := "<domain>'$(reboot)' \"`x`\"\n</domain>\n"
			act := remoteStart{what: "deploy", dir: vmDir, files: files, stdin: []byte(domain),
				argv: []string{deploy, vmDir + "/deployment.0", "node1", "42", "node1"}}
			record := []byte(`{"op":"record","vm":42,"run":"r'un"}`)
			req := []byte(`{"op":"start","vm":42}`)

			pkgBin, synced := filepath.Join(dir, "no-package-binary"), bin
			if tc.pkg {
				pkgBin, synced = bin, filepath.Join(dir, "no-synced-binary")
			}
			cmd := exec.Command("sh", "-c", shellJoin(sessionCommand(pkgBin, synced, "/etc/one/it's.yaml", record, act)))
			var in bytes.Buffer
			if err := hoststep.WriteRequestFrame(&in, req); err != nil {
				t.Fatal(err)
			}
			if !tc.noGo {
				in.WriteString(GoLine + "\n")
				in.WriteString(domain)
			}
			cmd.Stdin = &in
			var rest, stderr bytes.Buffer
			out := &hoststep.FrameSplitter{Rest: &rest}
			cmd.Stdout, cmd.Stderr = out, &stderr
			code := 0
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatal(err)
				}
				code = ee.ExitCode()
			}
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.wantCode, stderr.String())
			}
			if !out.Framed() || string(out.Body) != tc.answer {
				t.Fatalf("frame %v %q, want %q", out.Framed(), out.Body, tc.answer)
			}
			if got := string(out.Unframed()); got != "host step diagnostics\n" {
				t.Errorf("before the frame %q, want the step's stderr", got)
			}
			if got := readOr(filepath.Join(dir, "request")); got != string(req) {
				t.Errorf("the step read %q, want %q", got, req)
			}
			argv := readOr(filepath.Join(dir, "argv"))
			if !strings.HasPrefix(argv, fmt.Sprintf("host --framed --min-claim-format %d --config /etc/one/it's.yaml\n", engine.ClaimFormat)) {
				t.Errorf("host binary argv %q", argv)
			}
			if !tc.wantDeploy {
				if rest.Len() != 0 || fileExists(filepath.Join(dir, "deploy.args")) || fileExists(filepath.Join(vmDir, "vm.xml")) {
					t.Fatalf("after a refusal: stdout %q, deploy ran %v, vm.xml written %v", rest.String(), fileExists(filepath.Join(dir, "deploy.args")), fileExists(filepath.Join(vmDir, "vm.xml")))
				}
				if stderr.Len() != 0 {
					t.Errorf("stderr after a refusal %q, want nothing (the step's goes before its frame)", stderr.String())
				}
			} else {
				if got, want := readOr(filepath.Join(dir, "deploy.stdin")), domain; got != want {
					t.Errorf("deploy stdin %q, want %q", got, want)
				}
				if got, want := readOr(filepath.Join(dir, "deploy.args")), vmDir+"/deployment.0|node1|42|node1|"; got != want {
					t.Errorf("deploy args %q, want %q", got, want)
				}
				if want := map[bool]string{false: "one-42\n", true: ""}[tc.deployFail]; rest.String() != want {
					t.Errorf("after the frame %q, want only the deploy's output %q", rest.String(), want)
				}
				for _, f := range files {
					if got := readOr(filepath.Join(vmDir, f.name)); got != string(f.data) {
						t.Errorf("%s %q, want %q", f.name, got, f.data)
					}
				}
			}
			recPath := filepath.Join(dir, "record")
			if tc.wantRecord {
				deadline := time.Now().Add(30 * time.Second)
				for !fileExists(recPath) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if got := readOr(recPath); got != string(record) {
					t.Fatalf("background record got %q, want %q", got, record)
				}
				if argv := readOr(filepath.Join(dir, "argv")); !strings.Contains(argv, "host --detached --config /etc/one/it's.yaml\n") {
					t.Errorf("record argv %q", argv)
				}
			} else if strings.Contains(readOr(filepath.Join(dir, "argv")), "--detached") {
				t.Fatal("the record ran although the deploy did not succeed")
			}
		})
	}
}

func readOr(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestStartScriptConstant: the remote script depends only on how many
// files go with it, never on data.
func TestStartScriptConstant(t *testing.T) {
	a := startScript([]vmDirFileData{{"vm.xml", []byte("$(a)")}, {"ds.xml", []byte("b")}})
	b := startScript([]vmDirFileData{{"vm.xml", []byte("x")}, {"ds.xml", []byte("'")}})
	if a != b {
		t.Fatal("the script text depends on the files' contents")
	}
	if strings.Contains(a, "$(a)") || startScript(nil) == a {
		t.Fatal("unexpected script")
	}
}

// TestOneSession drives oneSession through a stand-in ssh that runs the
// remote command in a local shell (as sshd hands it to the login shell)
// and the fake host binary: an admitted start relays only the deploy's
// output and stderr; a refusal is the step's error, with nothing on stdout
// or stderr and the deploy unrun; a host binary without --framed (an
// older version) answers plainly and the caller falls back to separate
// commands, nothing having run.
func TestOneSession(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		answer                string
		code                  int
		old                   bool
		wantErr, wantFallback bool
		wantStdout            string
		wantSkew              string // the refusal for a host older than the claim format
	}{
		{name: "admitted", answer: `{"op":"start","ok":true,"version":4,"versions":` + currentVersions + `}`, wantStdout: "one-42\n"},
		{name: "refused", answer: `{"op":"start","ok":false,"kind":"refused","error":"claimed by host b","version":4}`, code: 4, wantErr: true},
		{name: "older host binary", old: true, wantFallback: true},
		// The host step refused: the hook beside it reads an older claim format.
		{name: "old hook", answer: `{"op":"start","ok":false,"kind":"ceph","error":"host node1: its libvirt hook ...","version":4,"versions":` + oldHookVersions + `}`,
			code: 3, wantErr: true, wantSkew: "host node1's libvirt hook /usr/lib/rbdfence/bin/rbdfence-hook (0300e58) reads claim format 1"},
		// A host binary of 0300e58 rejects the claim format flag (framed: it knows --framed).
		{name: "0300e58 host step", answer: `{"ok":false,"kind":"usage","error":"host: flag provided but not defined: -min-claim-format (try: rbdfence help)"}`,
			code: 2, wantErr: true, wantSkew: "reports no versions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, s string) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
					t.Fatal(err)
				}
				return p
			}
			write("ssh", "#!/bin/sh\nfor last; do :; done\necho x >> \""+dir+"/sessions\"\nexec sh -c \"$last\"\n")
			bin := write("rbdfence-host", fakeHostBinary)
			if tc.old {
				bin = write("rbdfence-host", "#!/bin/sh\necho x >> \""+dir+"/argv\"\necho '{\"ok\":false,\"kind\":\"usage\",\"error\":\"host: flag provided but not defined: -framed\"}'\nexit 2\n")
			}
			write("answer", tc.answer)
			write("code", strconv.Itoa(tc.code))
			deploy := write("deploy", "#!/bin/sh\ncat > \""+dir+"/deploy.stdin\"\necho 'deploy says' >&2\necho one-42\n")

			cfg := config.Default()
			cfg.OpenNebula.SSH = filepath.Join(dir, "ssh")
			cfg.OpenNebula.SSHPersist = 0 // no ssh -G probe among the counted sessions (TestSSHOwnMaster has it)
			cfg.OpenNebula.HostBinary = bin
			cfg.OpenNebula.HostPackageBinary = ""
			cfg.AuditLog = filepath.Join(dir, "audit.log")
			cfg.SpoolDir = filepath.Join(dir, "spool")
			var stdout, stderr bytes.Buffer
			e := &Env{Cfg: cfg, Stdout: &stdout, Stderr: &stderr, Log: NewLog(&stderr, 42)}
			res := &StartResult{VM: &opennebula.VMInfo{ID: 42}, Host: "node1", Seq: 1, Run: "r"}
			req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Seq: 1, Host: "node1", Run: "r", Source: "frontend"}
			act := remoteStart{vm: 42, what: "deploy", argv: []string{deploy}, stdin: []byte("<domain/>"), stdout: &stdout}
			code, fallback, err := e.oneSession(context.Background(), res, req, act)
			if tc.wantStdout != "" {
				// An admitted start leaves the record running in the
				// background: wait for it before the directory goes.
				waitFor(t, filepath.Join(dir, "record"))
			}
			if fallback != tc.wantFallback || (err != nil) != tc.wantErr {
				t.Fatalf("code %d fallback %v err %v\nstderr %s", code, fallback, err, stderr.String())
			}
			if n := strings.Count(readOr(filepath.Join(dir, "sessions")), "x"); n != 1 {
				t.Errorf("%d ssh sessions, want 1", n)
			}
			if stdout.String() != tc.wantStdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.wantStdout)
			}
			ran := fileExists(filepath.Join(dir, "deploy.stdin"))
			if ran != (tc.wantStdout != "") {
				t.Fatalf("deploy ran: %v", ran)
			}
			if ran {
				if got := readOr(filepath.Join(dir, "deploy.stdin")); got != "<domain/>" {
					t.Errorf("deploy stdin %q", got)
				}
				if !strings.Contains(stderr.String(), "deploy says") || strings.Contains(stderr.String(), "host step diagnostics") {
					t.Errorf("stderr %q: want the deploy's, not the step's", stderr.String())
				}
			} else if strings.Contains(stderr.String(), "diagnostics") {
				t.Errorf("the step's stderr was relayed: %q", stderr.String())
			}
			if tc.wantSkew != "" {
				var fe *Error
				if !errors.As(err, &fe) || fe.Kind != outcome.Unavailable || !fe.Final || !strings.Contains(fe.Msg, tc.wantSkew) ||
					!strings.HasPrefix(fe.Msg, "rbdfence: refused, nothing fenced: node1's rbdfence is too old; upgrade, onehost sync | start: host node1's ") || !strings.Contains(fe.Msg, "; fix: upgrade the rbdfence and rbdfence-host packages on node1") {
					t.Errorf("error %v, want the refusal with the fix", err)
				}
			} else if tc.wantErr {
				var fe *Error
				if !errors.As(err, &fe) || fe.Kind != outcome.Refused || !strings.Contains(fe.Msg, "claimed by host b") {
					t.Errorf("error %v, want the refusal", err)
				}
			}
		})
	}
}

// currentVersions is what a host of this build reports; oldHookVersions a
// host whose hook is 0300e58's.
var (
	currentVersions = fmt.Sprintf(`{"step":{"path":"/var/tmp/one/rbdfence/rbdfence-host","version":"v","protocol":%d,"claim_format":%d},"hook":{"path":"/usr/lib/rbdfence/bin/rbdfence-hook","version":"v","claim_format":%[2]d}}`,
		hoststep.Version, engine.ClaimFormat)
	oldHookVersions = fmt.Sprintf(`{"step":{"path":"/var/tmp/one/rbdfence/rbdfence-host","version":"v","protocol":%d,"claim_format":%d},"hook":{"path":"/usr/lib/rbdfence/bin/rbdfence-hook","version":"0300e58"}}`,
		hoststep.Version, engine.ClaimFormat)
)

// TestOneSessionTooLong: a remote command over maxRemoteCommand (a VM with
// very many disks) is not attempted: the caller runs separate commands.
func TestOneSessionTooLong(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.OpenNebula.SSH = filepath.Join(dir, "no-ssh-may-run")
	e := &Env{Cfg: cfg, Stdout: io.Discard, Stderr: io.Discard, Log: NewLog(io.Discard, 42)}
	req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Seq: 1, Host: "node1", Run: "r", Source: "frontend"}
	for i := 0; i < 2000; i++ {
		req.Disks = append(req.Disks, vmdisk.Disk{ID: strconv.Itoa(i), Pool: "one", Name: "one-" + strings.Repeat("9", 40), Monitors: []string{"10.0.0.1:6789"}})
	}
	res := &StartResult{VM: &opennebula.VMInfo{ID: 42}, Host: "node1", Seq: 1, Run: "r"}
	code, fallback, err := e.oneSession(context.Background(), res, req, remoteStart{vm: 42, what: "deploy", argv: []string{"/x/deploy"}, stdout: io.Discard})
	if !fallback || err != nil || code != -1 {
		t.Fatalf("code %d fallback %v err %v, want a fallback", code, fallback, err)
	}
}

// waitFor waits (up to a minute) until path exists.
func waitFor(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !fileExists(path); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within a minute", path)
		}
	}
}
