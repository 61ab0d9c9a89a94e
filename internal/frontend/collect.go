package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/failpoint"
	"github.com/rbdfence/rbdfence/internal/hostspool"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// Event collection: the front-end, which already reaches every host over
// OpenNebula's ssh as oneadmin, delivers the events the hosts spooled (the
// hook's, for starts the front-end did not drive) to oned, so that hosts
// hold no oned credentials. Per host: "spool list" over ssh, each event to
// oned, "spool ack" with the ids oned took (internal/hostspool).

// collectRounds bounds the list/deliver/ack rounds per host per collection
// (a round takes up to hostspool.MaxEvents events).
const collectRounds = 10

// collectParallel bounds the hosts collected at once.
const collectParallel = 16

// CollectResult is what collecting one host's spool did.
type CollectResult struct {
	Host      string   `json:"host"`
	Delivered int      `json:"delivered"`
	Acked     int      `json:"acked"`
	Corrupt   []string `json:"corrupt,omitempty"`   // files the host set aside
	SetAside  []string `json:"set_aside,omitempty"` // events oned can never record, kept in the host's gone/
	More      bool     `json:"more,omitempty"`      // events left for the next collection
	Error     string   `json:"error,omitempty"`     // one line; "" when the host was collected
}

// Failed reports whether the host could not be collected completely.
func (r CollectResult) Failed() bool { return r.Error != "" }

// KVMHosts selects the hosts whose spools a collection visits: hosts whose
// VM_MAD is one of kvmMads (the VM_MADs that run the kvm driver), in any
// state but OFFLINE. A DISABLED host still runs its VMs (and its hook
// still spools); an OFFLINE one is powered off by the admin, and trying it
// would only wait for ssh's timeout. ERROR hosts are tried: monitoring may
// fail while ssh works, and events may be waiting there. names, when not
// empty, limits the selection to those hosts, in any state; a name that
// is not in the pool is an error.
func KVMHosts(pool []opennebula.PoolHost, kvmMads []string, names []string) ([]string, error) {
	isKVM := map[string]bool{}
	for _, m := range kvmMads {
		isKVM[m] = true
	}
	var out []string
	if len(names) > 0 {
		byName := map[string]opennebula.PoolHost{}
		for _, h := range pool {
			byName[h.Name] = h
		}
		seen := map[string]bool{}
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			h, ok := byName[n]
			if !ok {
				return nil, fmt.Errorf("host %q is not in oned's host pool (see: onehost list)", clip(n))
			}
			if !isKVM[h.VMMad] {
				return nil, fmt.Errorf("host %s has VM_MAD %q, which does not run the kvm driver", h.Name, clip(h.VMMad))
			}
			out = append(out, h.Name)
		}
		return out, nil
	}
	for _, h := range pool {
		if isKVM[h.VMMad] && h.State != opennebula.HostOffline {
			out = append(out, h.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// KVMMads returns the names of the VM_MADs in oned.conf (conf) that run
// the kvm driver, e.g. kvm and qemu (share/etc/oned.conf:488-498 of
// release-7.4.0).
func KVMMads(conf []byte) []string {
	var out []string
	for _, m := range ParseVMMads(conf) {
		if kvm, err := m.RunsKVMDriver(); err == nil && kvm {
			out = append(out, m.Name)
		}
	}
	return out
}

// DefaultKVMMads are the VM_MADs of a stock oned.conf that run the kvm
// driver, used when oned.conf cannot be read.
var DefaultKVMMads = []string{"kvm", "qemu"}

// CollectTimeout is the default bound of one host's collection: ssh's
// connect (timeouts.ssh), then timeouts.total for the spool steps and the
// deliveries to oned.
func CollectTimeout(cfg *config.Config) time.Duration {
	return time.Duration(cfg.Timeouts.SSH) + time.Duration(cfg.Timeouts.Total)
}

// Collect collects the spools of hosts, in parallel, each bounded by
// perHost, and delivers their events to sink one at a time (so that two
// hosts never write one VM's template at once). One host that does not
// answer delays no other. Results are in the order of hosts.
func (e *Env) Collect(ctx context.Context, hosts []string, sink events.Sink, perHost time.Duration) []CollectResult {
	out := make([]CollectResult, len(hosts))
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, collectParallel)
		mu    sync.Mutex
		guard = sinkFunc(func(ctx context.Context, ev events.Event) error {
			mu.Lock()
			defer mu.Unlock()
			return sink.RecordEvent(ctx, ev)
		})
	)
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			hctx, cancel := context.WithTimeout(ctx, perHost)
			defer cancel()
			out[i] = e.collectHost(hctx, h, guard, perHost)
		}()
	}
	wg.Wait()
	return out
}

type sinkFunc func(ctx context.Context, ev events.Event) error

func (f sinkFunc) RecordEvent(ctx context.Context, ev events.Event) error { return f(ctx, ev) }

// collectHost runs list/deliver/ack rounds on host until its spool is
// empty, oned stops taking events, or ctx ends.
func (e *Env) collectHost(ctx context.Context, host string, sink events.Sink, budget time.Duration) CollectResult {
	r := CollectResult{Host: host}
	var errs []string
	for round := 0; round < collectRounds; round++ {
		var l hostspool.List
		if err := e.spoolStep(ctx, host, "list", nil, budget, func(b []byte) error {
			got, err := hostspool.ReadList(bytes.NewReader(b))
			if got != nil {
				l = *got
			}
			return err
		}); err != nil {
			errs = append(errs, err.Error())
			break
		}
		for _, c := range l.Corrupt {
			r.Corrupt = append(r.Corrupt, c.File)
		}
		var delivered, gone []string
		stopped := false
		for _, ev := range l.Events {
			if err := sink.RecordEvent(ctx, ev); err != nil {
				if errors.Is(err, events.ErrGone) {
					// Never recordable: offering it every minute would
					// fail this host's collection forever. The host keeps
					// it in its spool's gone/ (and its audit log).
					gone = append(gone, ev.ID)
					errs = append(errs, fmt.Sprintf("event %s (vm %d) can never be delivered (%s): set aside on the host, not offered again", ev.ID, ev.VM, clip(err.Error())))
					continue
				}
				errs = append(errs, fmt.Sprintf("event %s (vm %d) not delivered, kept on the host: %s", ev.ID, ev.VM, clip(err.Error())))
				if errors.Is(err, events.ErrUnavailable) || ctx.Err() != nil {
					stopped = true
					break
				}
				continue
			}
			delivered = append(delivered, ev.ID)
		}
		r.Delivered += len(delivered)
		if len(delivered)+len(gone) > 0 {
			// A crash here leaves the events on the host: the next
			// collection offers them again and oned keeps each once.
			failpoint.Hit("collect-before-ack")
			body, _ := json.Marshal(hostspool.Ack{Version: hostspool.Version, IDs: delivered, Gone: gone})
			if err := e.spoolStep(ctx, host, "ack", body, budget, func(b []byte) error {
				a, err := hostspool.ReadAckResult(bytes.NewReader(b))
				if a != nil {
					r.Acked += a.Removed + len(a.Missing)
					r.SetAside = append(r.SetAside, a.SetAside...)
				}
				return err
			}); err != nil {
				errs = append(errs, "delivered events not acknowledged (the next collection offers them again, oned keeps each once): "+err.Error())
				break
			}
		}
		r.More = l.More
		if stopped || !l.More || len(delivered)+len(gone) == 0 {
			break
		}
	}
	if len(r.Corrupt) > 0 {
		errs = append(errs, fmt.Sprintf("%d corrupt spool file(s) set aside on the host: %s", len(r.Corrupt), strings.Join(r.Corrupt, ", ")))
	}
	r.Error = strings.Join(errs, "; ")
	return r
}

// spoolStep runs "rbdfence-host spool <op>" on host over ssh with stdin
// and hands its stdout to read. The error says, in one line, why no valid
// answer came back.
func (e *Env) spoolStep(ctx context.Context, host, op string, stdin []byte, budget time.Duration, read func([]byte) error) error {
	argv, err := e.sshArgv(host, e.spoolCommand(op))
	if err != nil {
		return err
	}
	stdout := &capBuffer{max: hostspool.MaxSize + 1}
	stderr := &capBuffer{max: 64 << 10}
	code, rerr := run(ctx, proc{argv: argv, stdin: bytes.NewReader(stdin), stdout: stdout, stderr: stderr, timeout: budget})
	why := lastLine(stderr.buf.Bytes())
	switch {
	case errors.Is(rerr, errTimeout) || (rerr != nil && ctx.Err() != nil):
		return fmt.Errorf("spool %s did not answer within %s (ssh timeouts.ssh + timeouts.total, or --host-timeout)", op, budget)
	case rerr != nil:
		return fmt.Errorf("cannot run ssh for spool %s: %v", op, rerr)
	case code == 255:
		return fmt.Errorf("ssh failed: %s", orDash(why))
	case code == 126 || code == 127:
		return fmt.Errorf("the rbdfence host binary %s cannot run (exit %d: %s); run 'onehost sync --force'", e.Cfg.OpenNebula.HostBinary, code, orDash(why))
	case code != 0 && strings.Contains(why, `unknown verb "spool"`):
		return fmt.Errorf("the host's rbdfence is older than this front-end's (it has no 'spool' verb); %s", "run 'onehost sync --force' as oneadmin")
	}
	if stdout.over {
		return fmt.Errorf("spool %s answer larger than %d bytes", op, hostspool.MaxSize)
	}
	if err := read(stdout.buf.Bytes()); err != nil {
		if code != 0 && len(bytes.TrimSpace(stdout.buf.Bytes())) == 0 {
			return fmt.Errorf("spool %s failed (exit %d): %s", op, code, orDash(why))
		}
		return err
	}
	return nil
}

// spoolCommand is "rbdfence-host spool <op>" with the host config, as
// hostCommand (the same host binary: hostArgv).
func (e *Env) spoolCommand(op string) []string {
	args := []string{"spool", op}
	if c := e.Cfg.OpenNebula.HostConfig; c != config.DefaultPath {
		args = append(args, "--config", c)
	}
	return e.hostArgv(args...)
}
