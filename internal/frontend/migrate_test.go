package frontend

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// These tests pin the migration failure policy. The host side is a
// recording stand-in for "rbdfence host" reached through a local ssh
// stand-in; the real thing runs in test/frontend.

const fakeSSH = `#!/bin/sh
# ssh stand-in: drops options, records the host, runs the command locally.
while [ $# -gt 0 ]; do
	case "$1" in
	-o|-F|-i|-p) shift 2 ;;
	-*) shift ;;
	*) break ;;
	esac
done
echo "$1" >> "$STUB_DIR/ssh-hosts"
shift
exec sh -c "$*"
`

// fakeHost answers with $STUB_DIR/resp-<op>.json (exit code in code-<op>),
// recording each request.
const fakeHost = `#!/bin/sh
req=$(cat)
echo "$req" >> "$STUB_DIR/requests"
op=$(printf '%s' "$req" | sed -n 's/.*"op":"\([a-z]*\)".*/\1/p')
[ -f "$STUB_DIR/resp-$op.json" ] && cat "$STUB_DIR/resp-$op.json"
exit $(cat "$STUB_DIR/code-$op" 2>/dev/null || echo 0)
`

// origScript records $0, its arguments and stdin, then exits $ORIG_CODE.
const origScript = `#!/bin/bash
echo "$0" > "$STUB_DIR/orig-argv0"
printf '%s\n' "$@" > "$STUB_DIR/orig-args"
cat > "$STUB_DIR/orig-stdin"
echo "original output"
exit ${ORIG_CODE:-0}
`

type stub struct {
	dir  string
	self string
	env  *Env
	out  *bytes.Buffer
	errb *bytes.Buffer
}

func newStub(t *testing.T, op string, withOrig bool) *stub {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ssh := write("ssh", fakeSSH)
	host := write("rbdfence-host", fakeHost)
	self := filepath.Join(dir, "tm", "ceph", op)
	if err := os.MkdirAll(filepath.Dir(self), 0o755); err != nil {
		t.Fatal(err)
	}
	if withOrig {
		write("tm/ceph/"+op+OrigSuffix, origScript)
	}
	t.Setenv("STUB_DIR", dir)
	cfg := config.Default()
	cfg.OpenNebula.SSH = ssh
	cfg.OpenNebula.HostBinary = host
	cfg.OpenNebula.AuthFile = filepath.Join(dir, "no-auth") // oned is never needed here
	cfg.SpoolDir = filepath.Join(dir, "spool")
	cfg.AuditLog = filepath.Join(dir, "audit.log")
	cfg.Timeouts.SSH = config.Duration(10 * time.Second)
	var out, errb bytes.Buffer
	return &stub{dir: dir, self: self, out: &out, errb: &errb,
		env: &Env{Cfg: cfg, Stdout: &out, Stderr: &errb, Log: NewLog(&errb, -1)}}
}

func (s *stub) respond(t *testing.T, op string, r *hoststep.Response, code int) {
	t.Helper()
	if r != nil {
		b, _ := json.Marshal(r)
		if err := os.WriteFile(filepath.Join(s.dir, "resp-"+op+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.dir, "code-"+op), []byte(fmt.Sprint(code)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (s *stub) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name))
	return string(b)
}

func vmStdin(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../opennebula/testdata/vm-42-running.xml")
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestMigratePolicy(t *testing.T) {
	ok := func(op string) *hoststep.Response { return &hoststep.Response{OK: true, Op: op} }
	fail := func(op, kind string) *hoststep.Response {
		return &hoststep.Response{Op: op, Kind: outcome.Parse(kind), Error: "VM 42: something " + kind}
	}
	args := []string{"node1", "node2", "/var/lib/one//datastores/0/42", "42", "0"}
	for _, tc := range []struct {
		name     string
		op       string
		resp     *hoststep.Response
		respCode int
		origCode int
		noOrig   bool
		stdin    string // "" means the VM XML
		args     []string
		// want: exit code the driver would use; wantKind for *Error.
		wantCode  int
		wantPlain string // substring of the returned error's message
		wantLog   string // substring of stderr
		wantOps   []string
		wantHost  string // where the step ran (ssh-hosts)
	}{
		{name: "premigrate ok", op: "premigrate", resp: ok("premigrate"), wantCode: 0, wantOps: []string{"premigrate"}, wantHost: "node1"},
		{name: "premigrate refused aborts", op: "premigrate", resp: fail("premigrate", "refused"), respCode: 4, wantCode: outcome.Refused.Code(), wantPlain: "something refused", wantOps: []string{"premigrate"}},
		{name: "premigrate ceph down aborts", op: "premigrate", resp: fail("premigrate", "ceph"), respCode: 3, wantCode: outcome.Unavailable.Code(), wantPlain: "something ceph"},
		{name: "premigrate host unreachable aborts", op: "premigrate", resp: nil, respCode: 255, wantCode: outcome.Unavailable.Code(), wantPlain: "ssh to host node1 failed"},
		{name: "premigrate original fails: window closed again", op: "premigrate", resp: ok("premigrate"), origCode: 7, wantCode: 7, wantOps: []string{"premigrate", "failmigrate"}},
		{name: "premigrate bad stdin aborts", op: "premigrate", stdin: "%%%", wantCode: outcome.Usage.Code(), wantPlain: "not base64"},
		{name: "premigrate original missing", op: "premigrate", resp: ok("premigrate"), noOrig: true, wantCode: outcome.Failure.Code(), wantPlain: "is missing"},
		{name: "premigrate same host", op: "premigrate", args: []string{"node1", "node1", "/d", "42", "0"}, wantCode: 0, wantOps: nil},
		{name: "premigrate from migrate_other", op: "premigrate", resp: ok("premigrate"), args: append(append([]string{}, args...), "ssh"), wantCode: 0, wantOps: []string{"premigrate"}},
		{name: "postmigrate ok", op: "postmigrate", resp: ok("postmigrate"), wantCode: 0, wantOps: []string{"postmigrate"}, wantHost: "node2"},
		{name: "postmigrate failure keeps original's code", op: "postmigrate", resp: fail("postmigrate", "failure"), respCode: 1, wantCode: 0, wantLog: "ERROR: 42 rbdfence: VM 42: rbdfence postmigrate"},
		{name: "postmigrate original fails", op: "postmigrate", resp: ok("postmigrate"), origCode: 2, wantCode: 2},
		{name: "postmigrate bad stdin", op: "postmigrate", stdin: "bm90IFhNTA==", wantCode: 0, wantLog: "VM XML on stdin"},
		{name: "failmigrate ok", op: "failmigrate", resp: ok("failmigrate"), wantCode: 0, wantOps: []string{"failmigrate"}, wantHost: "node2"},
		{name: "failmigrate failure shows", op: "failmigrate", resp: fail("failmigrate", "failure"), respCode: 1, wantCode: outcome.Failure.Code(), wantPlain: "something failure"},
		{name: "failmigrate original's code wins", op: "failmigrate", resp: fail("failmigrate", "failure"), respCode: 1, origCode: 5, wantCode: 5, wantLog: "something failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStub(t, tc.op, !tc.noOrig)
			if tc.resp != nil || tc.respCode != 0 {
				s.respond(t, tc.op, tc.resp, tc.respCode)
			}
			s.respond(t, "failmigrate", ok("failmigrate"), 0)
			if tc.resp != nil && tc.op == "failmigrate" {
				s.respond(t, tc.op, tc.resp, tc.respCode)
			}
			t.Setenv("ORIG_CODE", fmt.Sprint(tc.origCode))
			a := tc.args
			if a == nil {
				a = args
			}
			stdin := tc.stdin
			if stdin == "" {
				stdin = vmStdin(t)
			}
			err := Migrate(t.Context(), s.env, tc.op, s.self, a, strings.NewReader(stdin))
			code := 0
			var (
				fe *Error
				xe *ExitError
			)
			switch {
			case errors.As(err, &xe):
				code = xe.Code
			case errors.As(err, &fe):
				code = fe.Kind.Code()
				if strings.Contains(fe.Msg, "\n") {
					t.Errorf("multi-line message %q", fe.Msg)
				}
			case err != nil:
				t.Fatalf("untyped error %v", err)
			}
			if code != tc.wantCode {
				t.Fatalf("exit %d (%v), want %d\nstderr:\n%s", code, err, tc.wantCode, s.errb.String())
			}
			if tc.wantPlain != "" && (fe == nil || !strings.Contains(fe.Msg, tc.wantPlain)) {
				t.Errorf("error %v, want it to say %q", err, tc.wantPlain)
			}
			if tc.wantLog != "" && !strings.Contains(s.errb.String(), tc.wantLog) {
				t.Errorf("stderr does not say %q:\n%s", tc.wantLog, s.errb.String())
			}
			if !tc.noOrig {
				// The original ALWAYS ran, as the wrapper, with the same args and stdin.
				if got := strings.TrimSpace(s.read("orig-argv0")); got != s.self {
					t.Errorf("original saw $0=%q, want the wrapper's path %q", got, s.self)
				}
				if got := s.read("orig-args"); got != strings.Join(a, "\n")+"\n" {
					t.Errorf("original args %q, want %q", got, a)
				}
				if got := s.read("orig-stdin"); got != stdin {
					t.Errorf("original stdin differs (%d bytes, want %d)", len(got), len(stdin))
				}
				if !strings.Contains(s.out.String(), "original output") {
					t.Errorf("original's stdout not relayed: %q", s.out.String())
				}
			}
			var ops []string
			for _, line := range strings.Split(strings.TrimSpace(s.read("requests")), "\n") {
				if line == "" {
					continue
				}
				var req hoststep.Request
				if err := json.Unmarshal([]byte(line), &req); err != nil {
					t.Fatalf("request %q: %v", line, err)
				}
				if req.VM != 42 || req.Src != "node1" || req.Source != "frontend" || len(req.Disks) == 0 {
					t.Errorf("request %+v", req)
				}
				ops = append(ops, req.Op)
			}
			if tc.wantOps != nil || tc.name == "premigrate same host" {
				if strings.Join(ops, ",") != strings.Join(tc.wantOps, ",") {
					t.Errorf("host steps %v, want %v", ops, tc.wantOps)
				}
			}
			if tc.wantHost != "" {
				if got := strings.Split(strings.TrimSpace(s.read("ssh-hosts")), "\n")[0]; got != tc.wantHost {
					t.Errorf("step ran on %q, want %q", got, tc.wantHost)
				}
			}
		})
	}
}

func TestMigrateBrokenConfigStillRunsOriginal(t *testing.T) {
	s := newStub(t, "postmigrate", true)
	e := BrokenEnv(errorf(outcome.Usage, -1, "config /x: fence.expire: bad"), s.out, s.errb)
	err := Migrate(t.Context(), e, "postmigrate", s.self, []string{"n1", "n2", "/d", "42", "0"}, strings.NewReader(vmStdin(t)))
	if err != nil {
		t.Fatalf("postmigrate must keep the original's code: %v", err)
	}
	if s.read("orig-args") == "" || !strings.Contains(s.errb.String(), "fence.expire") {
		t.Fatalf("original not run or config error not logged:\n%s", s.errb.String())
	}
	s = newStub(t, "premigrate", true)
	e = BrokenEnv(errorf(outcome.Usage, -1, "config /x: fence.expire: bad"), s.out, s.errb)
	err = Migrate(t.Context(), e, "premigrate", s.self, []string{"n1", "n2", "/d", "42", "0"}, strings.NewReader(vmStdin(t)))
	var fe *Error
	if !errors.As(err, &fe) || fe.Kind != outcome.Usage || s.read("orig-args") == "" {
		t.Fatalf("premigrate with a broken config must fail after the original ran: %v", err)
	}
}

func TestOriginalNonBashRunsDirectly(t *testing.T) {
	s := newStub(t, "failmigrate", false)
	orig := s.self + OrigSuffix
	if err := os.WriteFile(orig, []byte("#!/bin/sh\necho \"$0 $*\" > \"$STUB_DIR/sh-orig\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.env.runOriginal(t.Context(), "failmigrate", s.self, []string{"a", "b c"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(s.read("sh-orig")); got != orig+" a b c" {
		t.Fatalf("got %q", got)
	}
}
