package frontend

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// These tests pin the migration failure policy. The host side is a
// recording stand-in for "rbdfence host" reached through a local ssh
// stand-in; the real thing runs in test/frontend.

const fakeSSH = `#!/bin/sh
# ssh stand-in: drops options, records the host, runs the command locally.
echo "$*" >> "$STUB_DIR/ssh-argv"
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
	t.Setenv("STUB_DIR", dir)
	cfg := config.Default()
	cfg.OpenNebula.SSH = ssh
	cfg.OpenNebula.HostBinary = host
	cfg.OpenNebula.HostPackageBinary = ""                   // the synced stand-in, whatever this machine has
	cfg.OpenNebula.AuthFile = filepath.Join(dir, "no-auth") // oned is never needed here
	cfg.SpoolDir = filepath.Join(dir, "spool")
	cfg.AuditLog = filepath.Join(dir, "audit.log")
	cfg.Timeouts.SSH = config.Duration(10 * time.Second)
	// Every host runs this build (a migration asks the destination first).
	write("resp-versions.json", `{"version":4,"ok":true,"op":"versions","versions":`+currentVersions+`}`)
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
