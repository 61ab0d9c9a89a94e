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
