package frontend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

func TestKVMHosts(t *testing.T) {
	pool := []opennebula.PoolHost{
		{HostInfo: opennebula.HostInfo{Name: "n2", State: opennebula.HostMonitored}, VMMad: "kvm"},
		{HostInfo: opennebula.HostInfo{Name: "n1", State: opennebula.HostDisabled}, VMMad: "qemu"},
		{HostInfo: opennebula.HostInfo{Name: "n3", State: opennebula.HostOffline}, VMMad: "kvm"},
		{HostInfo: opennebula.HostInfo{Name: "n4", State: opennebula.HostError}, VMMad: "kvm"},
		{HostInfo: opennebula.HostInfo{Name: "c1", State: opennebula.HostMonitored}, VMMad: "lxc"},
	}
	for _, tc := range []struct {
		name  string
		mads  []string
		names []string
		want  string
		err   string
	}{
		{"every kvm host but OFFLINE", []string{"kvm", "qemu"}, nil, "n1 n2 n4", ""},
		{"only the kvm VM_MAD", []string{"kvm"}, nil, "n2 n4", ""},
		{"no kvm VM_MAD", nil, nil, "", ""},
		{"--host, any state", []string{"kvm"}, []string{"n3"}, "n3", ""},
		{"--host twice", []string{"kvm"}, []string{"n2", "n3", "n2"}, "n2 n3", ""},
		{"--host not in the pool", []string{"kvm"}, []string{"nope"}, "", "not in oned's host pool"},
		{"--host not kvm", []string{"kvm"}, []string{"c1"}, "", "does not run the kvm driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := KVMHosts(pool, tc.mads, tc.names)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != tc.want {
				t.Fatalf("got %q %v, want %q", got, err, tc.want)
			}
		})
	}
}

func TestKVMMads(t *testing.T) {
	conf := ""
	for _, m := range [][2]string{{"kvm", "-t 15 -r 0 kvm -l deploy=deploy-rbdfence"}, {"qemu", "-t 15 -r 0 kvm"}, {"lxc", "-t 15 -r 0 lxc"}} {
		conf += "VM_MAD = [\n    NAME = \"" + m[0] + "\",\n    EXECUTABLE = \"one_vmm_exec\",\n    ARGUMENTS = \"" + m[1] + "\"\n]\n"
	}
	if got := strings.Join(KVMMads([]byte(conf)), " "); got != "kvm qemu" {
		t.Fatalf("KVMMads = %q", got)
	}
}

// memSink is oned's record: idempotent by id, down when told.
type memSink struct {
	mu   sync.Mutex
	got  map[string]int
	down bool
	gone map[int]bool // VMs oned does not know
}

func (s *memSink) RecordEvent(_ context.Context, ev events.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return fmt.Errorf("oned: %w", events.ErrUnavailable)
	}
	if s.gone[ev.VM] {
		return fmt.Errorf("%w: one.vm.info: [VM %d] not found in oned", events.ErrGone, ev.VM)
	}
	if s.got == nil {
		s.got = map[string]int{}
	}
	s.got[ev.ID]++
	return nil
}

// spoolSSH is an ssh stand-in: host "good" serves the spool protocol from
// files under dir (list.json; ack requests recorded in ack.in), "hang"
// never answers, "dead" fails as ssh does, "old" has a host binary without
// the spool verb.
func spoolSSH(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ssh")
	script := `#!/bin/bash
while [ "${1#-}" != "$1" ]; do shift 2; done
host=$1; shift
case $host in
good) case "$*" in
	*list*) cat ` + dir + `/list.json ;;
	*ack*) cat > ` + dir + `/ack.in; echo '{"version":1,"ok":true,"removed":2}' ;;
	esac ;;
hang) exec sleep 60 ;;
dead) echo "ssh: connect to host dead port 22: Connection refused" >&2; exit 255 ;;
old) echo 'rbdfence: unknown verb "spool" (try: rbdfence help)' >&2; exit 2 ;;
esac
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCollect(t *testing.T) {
	dir := t.TempDir()
	list := `{"version":1,"ok":true,"events":[{"id":"e1","time":"2024-05-01T10:00:00Z","vm":1},{"id":"e2","time":"2024-05-01T10:00:01Z","vm":2}]}`
	if err := os.WriteFile(filepath.Join(dir, "list.json"), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.OpenNebula.SSH = spoolSSH(t, dir)
	e := &Env{Cfg: cfg}
	sink := &memSink{}
	start := time.Now()
	res := e.Collect(context.Background(), []string{"good", "hang", "dead", "old"}, sink, 2*time.Second)
	took := time.Since(start)
	byHost := map[string]CollectResult{}
	for _, r := range res {
		byHost[r.Host] = r
	}
	if g := byHost["good"]; g.Failed() || g.Delivered != 2 || g.Acked != 2 {
		t.Fatalf("good: %+v", g)
	}
	if ack, err := os.ReadFile(filepath.Join(dir, "ack.in")); err != nil || !strings.Contains(string(ack), `"ids":["e1","e2"]`) {
		t.Fatalf("ack request %q %v", ack, err)
	}
	if sink.got["e1"] != 1 || sink.got["e2"] != 1 {
		t.Fatalf("oned got %v", sink.got)
	}
	for host, want := range map[string]string{
		"hang": "did not answer within 2s",
		"dead": "ssh failed: ssh: connect to host dead port 22: Connection refused",
		"old":  "no 'spool' verb",
	} {
		r := byHost[host]
		if !r.Failed() || !strings.Contains(r.Error, want) || strings.Contains(r.Error, "\n") {
			t.Errorf("%s: %+v, want one line with %q", host, r, want)
		}
	}
	// The hanging host was cut at its bound, not after sleep's 60s.
	if took > 30*time.Second {
		t.Fatalf("Collect took %s", took)
	}

	// oned down: nothing acknowledged, the events stay on the host.
	_ = os.Remove(filepath.Join(dir, "ack.in"))
	sink.down = true
	res = e.Collect(context.Background(), []string{"good"}, sink, 2*time.Second)
	if !res[0].Failed() || res[0].Delivered != 0 || !strings.Contains(res[0].Error, "kept on the host") {
		t.Fatalf("oned down: %+v", res[0])
	}
	if _, err := os.Stat(filepath.Join(dir, "ack.in")); err == nil {
		t.Fatal("acknowledged while oned was down")
	}

	// VM 2 deleted from oned: its event is set aside on the host (kept,
	// not offered again), reported once; VM 1's is delivered and acked.
	sink.down, sink.gone = false, map[int]bool{2: true}
	res = e.Collect(context.Background(), []string{"good"}, sink, 2*time.Second)
	if !res[0].Failed() || !strings.Contains(res[0].Error, "event e2 (vm 2) can never be delivered") || strings.Contains(res[0].Error, "e1") {
		t.Fatalf("VM gone: %+v", res[0])
	}
	if ack, err := os.ReadFile(filepath.Join(dir, "ack.in")); err != nil || !strings.Contains(string(ack), `"ids":["e1"],"gone":["e2"]`) {
		t.Fatalf("ack request %q %v", ack, err)
	}
}
