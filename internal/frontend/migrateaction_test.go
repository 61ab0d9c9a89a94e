package frontend

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// migrateScript stands in for the host's vmm/kvm/migrate (and for an
// admin's local migrate_local): records args and stdin, exits $MIGRATE_CODE.
const migrateScript = `#!/bin/sh
printf '%s\n' "$@" > "$STUB_DIR/migrate-args"
cat > "$STUB_DIR/migrate-stdin"
echo "$0" > "$STUB_DIR/migrate-which"
echo migrate-ran >> "$STUB_DIR/requests"
if [ -n "$MIGRATE_SLEEP" ]; then : > "$STUB_DIR/migrate-started"; sleep "$MIGRATE_SLEEP"; fi
exit ${MIGRATE_CODE:-0}
`

// actionStdin is what the driver hands a local migrate action: the driver
// action XML, base64 (OpenNebulaDriver.rb:103-104 of release-7.4.0).
func actionStdin(t *testing.T) (b64, xml string) {
	t.Helper()
	vm, err := os.ReadFile("../opennebula/testdata/vm-42-running.xml")
	if err != nil {
		t.Fatal(err)
	}
	xml = "<VMM_DRIVER_ACTION_DATA><HOST>node1</HOST><MIGR_HOST>node2</MIGR_HOST><DEPLOY_ID>one-42</DEPLOY_ID>" +
		strings.TrimSpace(string(vm)) + "</VMM_DRIVER_ACTION_DATA>"
	return base64.StdEncoding.EncodeToString([]byte(xml)), xml
}

// protocol4Versions is a host of rbdfence before the failmigrate that asks
// the source (host step protocol 4, this claim format).
var protocol4Versions = fmt.Sprintf(`{"step":{"path":"/var/tmp/one/rbdfence/rbdfence-host","version":"v4","protocol":4,"claim_format":%d}}`, engine.ClaimFormat)

// withVersions adds to r a host step of protocol p, as every version 4 or
// later answer carries.
func withVersions(r *hoststep.Response, p int) *hoststep.Response {
	r.Versions = &hoststep.Versions{Step: hoststep.Binary{Path: "/var/tmp/one/rbdfence/rbdfence-host", Protocol: p, ClaimFormat: engine.ClaimFormat}}
	return r
}

func TestMigrateVMMPolicy(t *testing.T) {
	ok := func(op string) *hoststep.Response { return &hoststep.Response{OK: true, Op: op} }
	fail := func(op, kind string) *hoststep.Response {
		return &hoststep.Response{Op: op, Kind: outcome.Parse(kind), Error: "VM 42: something " + kind}
	}
	args := []string{"one-42", "node2", "node1", "42", "node1"}
	for _, tc := range []struct {
		name        string
		self        string // action name, default migrate-rbdfence
		pre, post   *hoststep.Response
		preCode     int
		failm       *hoststep.Response
		failmCode   int
		migrateCode string
		stdin       string
		args        []string
		wantCode    int
		// wantPlain is in the plain line (the VM's ERROR); a headline
		// ("rbdfence ...", "the migration ...") starts it.
		wantPlain  string
		wantLog    string
		wantOps    []string           // host steps and "migrate-ran", in order
		domain     *hoststep.Response // the source's answer to "domain"
		domainCode int
		// wantSrcDomain is in the failmigrate request (the relayed answer).
		wantSrcDomain string
		dstVersions   string // what the destination reports (default: this build)
		// action is timeouts.action; sleep how long the migration takes;
		// cancel stops the action (oned's SIGTERM) once it runs.
		action time.Duration
		sleep  string
		cancel bool
	}{
		{name: "ok", pre: ok("premigrate"), post: ok("postmigrate"), wantOps: []string{"versions", "premigrate", "migrate-ran", "postmigrate"}},
		{name: "window refused: not started", pre: fail("premigrate", "refused"), preCode: 4, wantCode: outcome.Refused.Code(),
			wantPlain: "rbdfence: refused, nothing fenced: premigrate on node1: something refused; the migration was not started, the VM keeps running on node1", wantOps: []string{"versions", "premigrate"}},
		{name: "source unreachable: not started", preCode: 255, wantCode: outcome.Unavailable.Code(), wantPlain: "rbdfence: refused, nothing fenced: ssh to node1 failed; fix ssh, then retry | ssh to host node1 failed for the premigrate step", wantOps: []string{"versions", "premigrate"}},
		// The source's libvirt answer (its "domain" step) goes to the
		// destination's failmigrate, which fences on it (or refuses).
		{name: "migration fails: copy fenced, its code kept", pre: ok("premigrate"), failm: ok("failmigrate"), migrateCode: "7", wantCode: 7,
			domain:  &hoststep.Response{OK: true, Op: "domain", Domain: &engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}},
			wantOps: []string{"versions", "premigrate", "migrate-ran", "domain", "failmigrate"}, wantSrcDomain: `"src_domain":{"seen":2,"said":"running","job":1,"job_said":"Job type: None"}`},
		{name: "migration fails, source unreachable: no answer relayed", pre: ok("premigrate"), failm: ok("failmigrate"), migrateCode: "7", wantCode: 7, domainCode: 255,
			wantOps: []string{"versions", "premigrate", "migrate-ran", "domain", "failmigrate"}, wantSrcDomain: `"src_domain":{"seen":4,"said":"could not be asked (ssh to host node1 failed for the domain step`},
		{name: "migration fails, source's host step too old: no answer relayed", pre: ok("premigrate"), failm: ok("failmigrate"), migrateCode: "7", wantCode: 7,
			domain:  &hoststep.Response{OK: true, Op: "domain"},
			wantOps: []string{"versions", "premigrate", "migrate-ran", "domain", "failmigrate"}, wantSrcDomain: `"src_domain":{"seen":4,"said":"could not be asked (the rbdfence host step on node1 is older`},
		{name: "migration fails, fence fails: said, code kept", pre: ok("premigrate"), failm: fail("failmigrate", "failure"), failmCode: 1, migrateCode: "7", wantCode: 7,
			wantLog: "ERROR: 42 rbdfence: the migration failed and its copy on node2 may not be fenced: rbdfence failmigrate (node1 -> node2) failed: something failure"},
		{name: "postmigrate fails: migration still succeeded", pre: ok("premigrate"), post: fail("postmigrate", "failure"), wantCode: 0,
			wantLog: "ERROR: 42 rbdfence: the migration succeeded, but: rbdfence postmigrate (node1 -> node2) failed: something failure"},
		// A host step older than 5 ignores the source's word and would
		// fence the copy on the failure alone: it gets no failmigrate.
		{name: "migration fails, destination's host step older than 5: refused, nothing fenced", pre: ok("premigrate"), failm: ok("failmigrate"), migrateCode: "7",
			dstVersions: protocol4Versions, wantCode: outcome.Unavailable.Code(),
			wantPlain: "rbdfence: refused, nothing fenced: node2's rbdfence is too old; upgrade, onevm recover | the migration failed; failmigrate: node2's host step is too old (rbdfence host step protocol 4, older than 5): it would fence the copy there without asking node1",
			wantLog:   "ERROR: 42 rbdfence: the migration node1 -> node2 failed (exit 7)",
			wantOps:   []string{"versions", "premigrate", "migrate-ran"}},
		{name: "migration fails, destination unreachable, source's host step older than 5: no fallback", pre: withVersions(ok("premigrate"), 4), failmCode: 255, migrateCode: "7",
			wantCode:  outcome.Unavailable.Code(),
			wantPlain: "rbdfence: refused, nothing fenced: node1's rbdfence is too old; upgrade, onevm recover | the migration failed; failmigrate: node1's host step is too old (rbdfence host step protocol 4,",
			wantOps:   []string{"versions", "premigrate", "migrate-ran", "domain", "failmigrate"}},
		{name: "migration fails, destination unreachable: fenced from the source", pre: withVersions(ok("premigrate"), hoststep.Version), failmCode: 255, migrateCode: "7",
			wantCode: 7, wantLog: "fencing from the source node1 every client that is not on it",
			wantOps: []string{"versions", "premigrate", "migrate-ran", "domain", "failmigrate", "failmigrate"}},
		// The destination's hook is 0300e58's: it would misread the window.
		{name: "old hook on the destination: not started", dstVersions: oldHookVersions, wantCode: outcome.Unavailable.Code(),
			wantPlain: "rbdfence: refused, nothing fenced: node2's rbdfence is too old; upgrade, onehost sync | migration: host node2's libvirt hook /usr/lib/rbdfence/bin/rbdfence-hook (0300e58) reads claim format 1, older than claim format 2; fix: upgrade the rbdfence and rbdfence-host packages on node2",
			wantOps:   []string{"versions"}},
		// Issue 18 item 2: rbdfence sets no limit of its own on the real
		// migration, and fences nothing when its outcome is unknown.
		{name: "migration outlives timeouts.action: waited for, then closed", pre: ok("premigrate"), post: ok("postmigrate"), action: time.Second, sleep: "3",
			wantOps: []string{"versions", "premigrate", "migrate-ran", "postmigrate"}},
		{name: "ssh to the source dies (255): nothing fenced, window kept", pre: ok("premigrate"), failm: ok("failmigrate"), migrateCode: "255", wantCode: outcome.Unavailable.Code(),
			wantPlain: "rbdfence: refused, nothing fenced: migration may still run; see virsh domjobinfo | cannot tell whether the migration node1 -> node2 still runs: the ssh session to the source ended with exit 255", wantOps: []string{"versions", "premigrate", "migrate-ran"}},
		{name: "action stopped during the migration: nothing fenced, window kept", pre: ok("premigrate"), failm: ok("failmigrate"), sleep: "30", cancel: true, wantCode: outcome.Unavailable.Code(),
			wantPlain: "rbdfence: refused, nothing fenced: migration may still run; see virsh domjobinfo | cannot tell whether the migration node1 -> node2 still runs: the action was stopped while the migration ran; the handover window stays open (", wantOps: []string{"versions", "premigrate", "migrate-ran"}},
		{name: "same host: no window", args: []string{"one-42", "node1", "node1", "42", "node1"}, wantOps: []string{"migrate-ran"}},
		{name: "admin's migrate_local wrapped", self: "migrate_local-rbdfence", pre: ok("premigrate"), post: ok("postmigrate"),
			wantOps: []string{"versions", "premigrate", "migrate-ran", "postmigrate"}},
		{name: "wrapped script missing", self: "migrate_gone-rbdfence", wantCode: outcome.Usage.Code(), wantPlain: "is missing", wantOps: nil},
		{name: "bad stdin", stdin: "%%%", wantCode: outcome.Usage.Code(), wantPlain: "not base64", wantOps: nil},
		{name: "not a driver action", stdin: base64.StdEncoding.EncodeToString([]byte("<VM><ID>42</ID></VM>")), wantCode: outcome.Usage.Code(), wantPlain: "want <VMM_DRIVER_ACTION_DATA>", wantOps: nil},
		{name: "bad args", args: []string{"one-42", "-oProxyCommand=x", "node1", "42", "node1"}, wantCode: outcome.Usage.Code(), wantPlain: "not a host name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStub(t, "premigrate", false)
			remotes := filepath.Join(s.dir, "hostremotes")
			if err := os.MkdirAll(filepath.Join(remotes, "vmm/kvm"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(remotes, "vmm/kvm/migrate"), []byte(migrateScript), 0o755); err != nil {
				t.Fatal(err)
			}
			s.env.Cfg.OpenNebula.RemoteDir = remotes
			vmmDir := filepath.Join(s.dir, "frontend", "vmm", "kvm")
			if err := os.MkdirAll(vmmDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(vmmDir, "migrate_local"), []byte(migrateScript), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.dstVersions != "" {
				if err := os.WriteFile(filepath.Join(s.dir, "resp-versions.json"), []byte(`{"version":4,"ok":true,"op":"versions","versions":`+tc.dstVersions+`}`), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s.respond(t, "premigrate", tc.pre, tc.preCode)
			s.respond(t, "postmigrate", tc.post, 0)
			s.respond(t, "failmigrate", tc.failm, tc.failmCode)
			s.respond(t, "domain", tc.domain, tc.domainCode)
			t.Setenv("MIGRATE_CODE", tc.migrateCode)
			t.Setenv("MIGRATE_SLEEP", tc.sleep)
			if tc.action > 0 {
				s.env.Cfg.Timeouts.Action = config.Duration(tc.action)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				go func() {
					for ctx.Err() == nil {
						if _, err := os.Stat(filepath.Join(s.dir, "migrate-started")); err == nil {
							cancel()
							return
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			self := tc.self
			if self == "" {
				self = "migrate-rbdfence"
			}
			a := tc.args
			if a == nil {
				a = args
			}
			b64, xml := actionStdin(t)
			stdin := tc.stdin
			if stdin == "" {
				stdin = b64
			}
			err := MigrateVMM(ctx, s.env, filepath.Join(vmmDir, self), a, strings.NewReader(stdin))
			code := Exit(err, s.errb)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; err %v\nstderr:\n%s", code, tc.wantCode, err, s.errb)
			}
			var fe *Error
			head := strings.HasPrefix(tc.wantPlain, "rbdfence")
			if tc.wantPlain != "" && (!errors.As(err, &fe) || !strings.Contains(fe.Msg, tc.wantPlain) || head && !strings.HasPrefix(fe.Msg, tc.wantPlain)) {
				t.Fatalf("error %v, want %q...", err, tc.wantPlain)
			}
			if errors.As(err, &fe) && strings.HasPrefix(fe.Msg, "VM ") {
				t.Fatalf("the plain line %q starts with the VM, which oned shows it on", fe.Msg)
			}
			if tc.wantLog != "" && !strings.Contains(s.errb.String(), tc.wantLog) {
				t.Fatalf("stderr lacks %q:\n%s", tc.wantLog, s.errb)
			}
			if strings.Contains(s.errb.String(), "VM 42: VM 42:") || strings.Contains(s.errb.String(), "rbdfence: VM 42: ") {
				t.Fatalf("the VM named again after its log line's id:\n%s", s.errb)
			}
			var ops []string
			for _, l := range strings.Split(strings.TrimSpace(s.read("requests")), "\n") {
				switch {
				case l == "migrate-ran":
					ops = append(ops, l)
				case l != "":
					ops = append(ops, strings.SplitN(strings.SplitN(l, `"op":"`, 2)[1], `"`, 2)[0])
					// A migration checks the step and the hook only: no
					// package or platform queries on its path.
					if strings.Contains(l, `"op":"versions"`) && !strings.Contains(l, `"brief":true`) {
						t.Fatalf("the migration asked for full versions: %s", l)
					}
				}
			}
			if tc.wantOps != nil || len(ops) > 0 && tc.wantPlain != "" {
				if fmt.Sprint(ops) != fmt.Sprint(tc.wantOps) {
					t.Fatalf("steps %v, want %v", ops, tc.wantOps)
				}
			}
			if tc.wantSrcDomain != "" {
				var failm string
				for _, l := range strings.Split(s.read("requests"), "\n") {
					if strings.Contains(l, `"op":"failmigrate"`) {
						failm = l
					}
				}
				if !strings.Contains(failm, tc.wantSrcDomain) {
					t.Fatalf("failmigrate request %s, want %s", failm, tc.wantSrcDomain)
				}
			}
			if s.read("migrate-which") == "" {
				return
			}
			if got := s.read("migrate-args"); got != strings.Join(a, "\n")+"\n" {
				t.Fatalf("migrate args %q, want %q", got, a)
			}
			wantStdin, wantWhich := xml, filepath.Join(remotes, "vmm/kvm/migrate")
			if self == "migrate_local-rbdfence" {
				// A local script gets stdin as the driver gave it.
				wantStdin, wantWhich = b64, filepath.Join(vmmDir, "migrate_local")
			}
			if got := s.read("migrate-stdin"); got != wantStdin {
				t.Fatalf("migrate stdin %q, want %q", got, wantStdin)
			}
			if got := strings.TrimSpace(s.read("migrate-which")); got != wantWhich {
				t.Fatalf("ran %s, want %s", got, wantWhich)
			}
			if self == "migrate-rbdfence" && !strings.Contains(s.read("ssh-argv"), "ForwardAgent=yes") {
				t.Fatalf("the remote migrate ran without agent forwarding: %s", s.read("ssh-argv"))
			}
		})
	}
}
