//go:build cgo

package fencer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/domstate"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// libvirt's answer reaches the engine as what it knows: only an absent or
// shut-off domain is knowledge that no QEMU of the VM runs (issue 18 item 1).
func TestAnswerOf(t *testing.T) {
	for _, tc := range []struct {
		st   domstate.State
		err  error
		want engine.DomainSeen
	}{
		{"", nil, engine.DomainAbsent},
		{"shut off", nil, engine.DomainAbsent},
		{"crashed", nil, engine.DomainAbsent},
		{"running", nil, engine.DomainActive},
		{"paused", nil, engine.DomainActive},
		{"in shutdown", nil, engine.DomainActive},
		{"pmsuspended", nil, engine.DomainAsleep},
		{"", errors.New("virsh domstate: exit status 1: error: failed to connect to the hypervisor"), engine.DomainNoAnswer},
		{"", errors.New("virsh domstate one-42: no answer within 3s"), engine.DomainNoAnswer},
	} {
		got := answerOf(tc.st, tc.err)
		if got.Seen != tc.want || got.Said == "" {
			t.Errorf("state %q err %v: got %+v, want %v with libvirt's words", tc.st, tc.err, got, tc.want)
		}
		if tc.err != nil && !strings.Contains(got.Said, tc.err.Error()) {
			t.Errorf("no answer must carry why: %+v", got)
		}
	}
}

// The step asks libvirt for the front-end's start only; with
// opennebula.remote: local it cannot ask the host's libvirt: no answer. A
// virsh that fails or hangs is no answer either.
func TestDomainAnswer(t *testing.T) {
	dir := t.TempDir()
	write := func(script string) {
		if err := os.WriteFile(filepath.Join(dir, "virsh"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	cfg := testConfig()
	cfg.Timeouts.Connect = config.Duration(500 * time.Millisecond)
	start := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Seq: 3, Host: "h1", Source: engine.SourceFrontend}
	for _, tc := range []struct {
		name   string
		virsh  string
		req    hoststep.Request
		want   engine.DomainSeen
		saying string
	}{
		{"running", "echo running", *start, engine.DomainActive, "running"},
		{"gone", "echo 'error: failed to get domain one-42' >&2; exit 1", *start, engine.DomainAbsent, "no such domain"},
		{"libvirtd down", "echo 'error: failed to connect to the hypervisor' >&2; exit 1", *start, engine.DomainNoAnswer, "failed to connect to the hypervisor"},
		{"libvirtd hung", "exec sleep 30", *start, engine.DomainNoAnswer, "no answer"},
		{"remote local", "echo 'shut off'", func() hoststep.Request { r := *start; r.Local = true; return r }(), engine.DomainNoAnswer, "opennebula.remote is local"},
		{"the hook's start", "echo running", func() hoststep.Request { r := *start; r.Source = engine.SourceHook; return r }(), engine.DomainUnasked, ""},
		{"a record", "echo running", func() hoststep.Request { r := *start; r.Op = hoststep.OpRecord; return r }(), engine.DomainUnasked, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(tc.virsh)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := domainAnswer(ctx, cfg, &tc.req)
			if got.Seen != tc.want || !strings.Contains(got.Said, tc.saying) {
				t.Fatalf("got %+v, want %v saying %q", got, tc.want, tc.saying)
			}
		})
	}
}

// A failmigrate from the source (the destination cannot be reached) asks
// the source's libvirt for one-N's state and job; only "running (or
// paused), Job type: None" is the engine's knowledge that no migration of
// it runs (issue 18 item 2, model-C). So does the front-end's "domain"
// step there, whose answer the failmigrate on the destination gets
// relayed. Other steps are not asked.
func TestJobAnswer(t *testing.T) {
	dir := t.TempDir()
	write := func(state, job string) {
		script := "#!/bin/sh\ncase \"$4\" in\ndomstate) " + state + ";;\ndomjobinfo) " + job + ";;\n*) exit 9;;\nesac\n"
		if err := os.WriteFile(filepath.Join(dir, "virsh"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	cfg := testConfig()
	cfg.Timeouts.Connect = config.Duration(500 * time.Millisecond)
	fail := &hoststep.Request{Op: hoststep.OpFailmigrate, VM: 42, Seq: 3, Host: "h1", Src: "h1", Dst: "h2", Source: engine.SourceFrontend}
	const idle, migrating = "printf 'Job type:         None        \\n\\n'", "printf 'Job type:         Unbounded   \\nOperation:        Outgoing migration\\n\\n'"
	for _, tc := range []struct {
		name         string
		state, job   string
		req          hoststep.Request
		seen         engine.DomainSeen
		jobSeen      engine.JobSeen
		said, jobSay string
	}{
		{"running, no job", "echo running", idle, *fail, engine.DomainActive, engine.JobNone, "running", "Job type: None"},
		{"paused, no job", "echo paused", idle, *fail, engine.DomainActive, engine.JobNone, "paused", "Job type: None"},
		{"migration runs", "echo running", migrating, *fail, engine.DomainActive, engine.JobRunning, "running", "Outgoing migration"},
		{"job not answered", "echo running", "echo 'error: failed to connect to the hypervisor' >&2; exit 1", *fail, engine.DomainActive, engine.JobNoAnswer, "running", "failed to connect"},
		{"job hung", "echo running", "exec sleep 30", *fail, engine.DomainActive, engine.JobNoAnswer, "running", "no answer"},
		{"gone before the job", "echo running", "echo 'error: failed to get domain one-42' >&2; exit 1", *fail, engine.DomainActive, engine.JobNoAnswer, "running", "gone"},
		{"absent", "echo 'error: failed to get domain one-42' >&2; exit 1", idle, *fail, engine.DomainAbsent, engine.JobUnasked, "no such domain", ""},
		{"shut off", "echo 'shut off'", idle, *fail, engine.DomainAbsent, engine.JobUnasked, "shut off", ""},
		{"libvirtd down", "echo 'error: failed to connect to the hypervisor' >&2; exit 1", idle, *fail, engine.DomainNoAnswer, engine.JobUnasked, "failed to connect", ""},
		{"remote local", "echo running", idle, func() hoststep.Request { r := *fail; r.Local = true; return r }(), engine.DomainNoAnswer, engine.JobUnasked, "opennebula.remote is local", ""},
		// On the destination libvirt is not asked there: the source's
		// answer the front-end relays decides, none is "not asked".
		{"failmigrate on dst", "echo running", idle, func() hoststep.Request { r := *fail; r.Host = "h2"; return r }(), engine.DomainUnasked, engine.JobUnasked, "", ""},
		{"failmigrate on dst, relayed", "echo 'shut off'", idle, func() hoststep.Request {
			r := *fail
			r.Host, r.SrcDomain = "h2", &engine.Domain{Seen: engine.DomainActive, Said: "running on h1", Job: engine.JobRunning, JobSaid: "Job type: Unbounded"}
			return r
		}(), engine.DomainActive, engine.JobRunning, "running on h1", "Unbounded"},
		// The front-end's "domain" step on the source asks as a
		// failmigrate from the source does.
		{"domain step", "echo running", migrating, func() hoststep.Request { r := *fail; r.Op = hoststep.OpDomain; return r }(), engine.DomainActive, engine.JobRunning, "running", "Outgoing migration"},
		{"postmigrate", "echo running", idle, func() hoststep.Request { r := *fail; r.Op = hoststep.OpPostmigrate; return r }(), engine.DomainUnasked, engine.JobUnasked, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(tc.state, tc.job)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var got engine.Domain
			if tc.req.Op == hoststep.OpDomain {
				resp := Do(ctx, cfg, &tc.req)
				if !resp.OK || resp.Domain == nil {
					t.Fatalf("domain step: %+v", resp)
				}
				got = *resp.Domain
			} else {
				got = domainAnswer(ctx, cfg, &tc.req)
			}
			if got.Seen != tc.seen || got.Job != tc.jobSeen || !strings.Contains(got.Said, tc.said) || !strings.Contains(got.JobSaid, tc.jobSay) {
				t.Fatalf("got %+v, want %v/%v saying %q/%q", got, tc.seen, tc.jobSeen, tc.said, tc.jobSay)
			}
		})
	}
}
