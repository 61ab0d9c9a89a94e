//go:build cgo

package hostfence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// Op names a host fence in audit records, events and metrics.
const Op = "fence-host"

// ActionWhole is the audit action of a whole-address entry.
const ActionWhole = "blocklisted-whole-address"

// Request is one host fence.
type Request struct {
	Host *opennebula.HostInfo
	// VMs are the VMs whose current placement is the host.
	VMs []*opennebula.VMInfo
	// HostIPs are the addresses of the host's Ceph clients as the caller
	// knows them (hostaddrs.Of: --host-addr, the host template's
	// RBDFENCE_HOST_ADDRESSES, or its name resolved; none when nothing is
	// known). The host's own addresses its claims record are added; the
	// claims' client addresses are fenced exactly and never widen them.
	HostIPs []netip.Addr
	// WholeAddress also blocklists each host address as a whole.
	WholeAddress bool
	Run          string
}

// Cluster is the outcome in one Ceph cluster (one Ceph access).
type Cluster struct {
	Monitors string                  `json:"monitors"`
	User     string                  `json:"user"`
	Result   *engine.HostFenceResult `json:"result,omitempty"`
	Error    string                  `json:"error,omitempty"`
}

// VM is the outcome for one VM over every cluster.
type VM struct {
	VM  int `json:"vm"`
	Seq int `json:"seq"`
	// Fenced are the client addresses blocklisted for this VM.
	Fenced []string `json:"fenced"`
	// Elsewhere: its claim records an instance on this other host, which
	// was left alone.
	Elsewhere string `json:"elsewhere,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Result is a host fence's outcome.
type Result struct {
	Host     string    `json:"host"`
	HostID   int       `json:"host_id"`
	Run      string    `json:"run"`
	Time     time.Time `json:"time"`
	HostIPs  []string  `json:"host_ips"`
	Whole    []string  `json:"whole_address,omitempty"`
	VMs      []VM      `json:"vms"`
	Clusters []Cluster `json:"clusters"`
	Fenced   int       `json:"fenced"`
	Errors   int       `json:"errors"`
	Expire   time.Time `json:"expire,omitzero"`
	// Audit are the records appended to the audit log.
	Audit []audit.Record `json:"-"`
}

// Err is nil when the fence is complete: every client fenced and every
// claim marked, in every cluster.
func (r *Result) Err() error {
	var msgs []string
	for _, c := range r.Clusters {
		if c.Error != "" {
			msgs = append(msgs, fmt.Sprintf("cluster %s: %s", c.Monitors, c.Error))
		}
		if c.Result != nil {
			for _, w := range c.Result.Whole {
				if w.Error != "" {
					msgs = append(msgs, fmt.Sprintf("whole address %s: %s", w.Address, w.Error))
				}
			}
		}
	}
	for _, v := range r.VMs {
		if v.Error != "" {
			msgs = append(msgs, fmt.Sprintf("VM %d: %s", v.VM, v.Error))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return &engine.IncompleteError{Problems: msgs}
}

// Report merges the per-VM reports (for metrics: images and fences).
func (r *Result) Report() *engine.Report {
	out := &engine.Report{Images: []engine.ImageReport{}}
	for _, c := range r.Clusters {
		if c.Result == nil {
			continue
		}
		for _, v := range c.Result.VMs {
			out.Merge(v.Report)
		}
	}
	out.Fenced = r.Fenced
	return out
}

type clusterPlan struct {
	access ceph.Config
	vms    []engine.HostVM
}

// plan splits the VMs' disks by Ceph access (cluster), in VM order.
func plan(cfg *config.Config, vms []*opennebula.VMInfo) []*clusterPlan {
	var out []*clusterPlan
	idx := map[string]*clusterPlan{}
	for _, vm := range vms {
		for _, g := range fencer.Groups(cfg, vm.Disks) {
			a := g.Access
			key := strings.Join([]string{a.Conf, a.MonHost, a.User, a.Keyring}, "\x00")
			p, ok := idx[key]
			if !ok {
				p = &clusterPlan{access: a}
				idx[key] = p
				out = append(out, p)
			}
			p.vms = append(p.vms, engine.HostVM{VM: vm.ID, Seq: vm.Seq, Stime: vm.Stime, Images: g.Images})
		}
	}
	return out
}

// Run fences the host in every cluster that holds its VMs' disks (the
// clusters in parallel), appends the audit log and returns the result. The
// caller checks Eligible first.
func Run(ctx context.Context, cfg *config.Config, req Request) (*Result, error) {
	opts, err := fencer.EngineOptions(cfg)
	if err != nil {
		return nil, err
	}
	opts.MissingOK = true
	ips := req.HostIPs
	res := &Result{Host: req.Host.Name, HostID: req.Host.ID, Run: req.Run, Time: time.Now().UTC()}
	plans := plan(cfg, req.VMs)
	res.Clusters = make([]Cluster, len(plans))
	var wg sync.WaitGroup
	for i, p := range plans {
		res.Clusters[i] = Cluster{Monitors: p.access.MonHost, User: p.access.User}
		wg.Add(1)
		go func(c *Cluster, p *clusterPlan) {
			defer wg.Done()
			s, err := fencer.Open(ctx, p.access, opts)
			if err != nil {
				c.Error = err.Error()
				return
			}
			defer s.Close()
			c.Result = s.Engine.FenceHost(ctx, engine.HostFence{Host: req.Host.Name, HostIPs: ips, VMs: p.vms,
				Pool: fencer.ClaimPool(cfg), Run: req.Run, WholeAddress: req.WholeAddress})
		}(&res.Clusters[i], p)
	}
	wg.Wait()
	summarize(res, req)
	res.Audit = auditRecords(res)
	if err := audit.Append(cfg.AuditLog, res.Audit); err != nil {
		return res, fmt.Errorf("host %s fenced, but the audit log was not written: %w", req.Host.Name, err)
	}
	return res, nil
}

// summarize fills the per-VM view and the counts from the clusters.
func summarize(res *Result, req Request) {
	byVM := map[int]*VM{}
	for _, vm := range req.VMs {
		res.VMs = append(res.VMs, VM{VM: vm.ID, Seq: vm.Seq, Fenced: []string{}})
	}
	for i := range res.VMs {
		byVM[res.VMs[i].VM] = &res.VMs[i]
	}
	ips := map[string]bool{}
	whole := map[string]bool{}
	for _, c := range res.Clusters {
		if c.Error != "" {
			res.Errors++
		}
		if c.Result == nil {
			continue
		}
		res.Fenced += c.Result.Fenced
		res.Errors += c.Result.Errors
		for _, ip := range c.Result.HostIPs {
			ips[ip.String()] = true
		}
		for _, w := range c.Result.Whole {
			if w.Fenced() {
				whole[w.Address] = true
				res.Expire = w.Expire
			}
		}
		for _, vr := range c.Result.VMs {
			v := byVM[vr.VM]
			if v == nil {
				continue
			}
			if vr.Error != "" {
				v.Error = strings.TrimPrefix(strings.TrimSpace(v.Error+"; "+vr.Error), "; ")
			}
			if vr.Elsewhere != "" {
				v.Elsewhere = vr.Elsewhere
			}
			for _, a := range fencedAddrs(vr.Report) {
				v.Fenced = appendNew(v.Fenced, a.Address)
				res.Expire = a.Expire
			}
		}
	}
	for ip := range ips {
		res.HostIPs = append(res.HostIPs, ip)
	}
	for a := range whole {
		res.Whole = append(res.Whole, a)
	}
	sort.Strings(res.HostIPs)
	sort.Strings(res.Whole)
	for i := range res.VMs {
		sort.Strings(res.VMs[i].Fenced)
	}
}

// fencedAddrs are the clients of r that were blocklisted.
func fencedAddrs(r *engine.Report) []engine.ClientReport {
	var out []engine.ClientReport
	if r == nil {
		return nil
	}
	for _, im := range r.Images {
		for _, c := range im.Clients {
			if c.Fenced() {
				out = append(out, c)
			}
		}
	}
	for _, c := range r.Recorded {
		if c.Fenced() {
			out = append(out, c)
		}
	}
	return out
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// auditRecords: one record per client fenced (or whose fence failed) per VM,
// and one per whole-address entry (VM -1).
func auditRecords(res *Result) []audit.Record {
	var out []audit.Record
	for _, c := range res.Clusters {
		if c.Result == nil {
			continue
		}
		for _, vr := range c.Result.VMs {
			out = append(out, audit.FromReport(vr.Report, audit.Meta{Run: res.Run, Op: Op, VM: audit.VMOf(vr.VM), Host: res.Host}, res.Time)...)
		}
		for _, w := range c.Result.Whole {
			r := audit.Record{Time: res.Time, Run: res.Run, Op: Op, Host: res.Host, Address: w.Address,
				Action: ActionWhole, Expire: w.Expire, Result: "ok"}
			if w.Error != "" {
				r.Result, r.Error = "error", w.Error
			}
			out = append(out, r)
		}
	}
	return out
}

// Events returns one event per VM that had a client fenced (or whose fence
// failed): the VM's user template shows that its instance on the failed host
// was fenced, with every address.
func Events(res *Result) []events.Event {
	var out []events.Event
	for _, v := range res.VMs {
		if len(v.Fenced) == 0 && v.Error == "" {
			continue
		}
		action := "host-fenced"
		if v.Error != "" {
			action = "host-fence-failed"
		}
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s|%d|%s", res.Run, v.VM, Op)))
		out = append(out, events.Event{ID: hex.EncodeToString(sum[:16]), Time: res.Time, VM: v.VM, Host: res.Host,
			Address: strings.Join(v.Fenced, " "), Action: action, Expire: res.Expire, Source: Op})
	}
	return out
}

// HostSummary is the host's summary event: the template merged into the
// host's template (RBDFENCE_HOST_FENCE, RBDFENCE_LAST_HOST_FENCE) and its
// one-line text.
func HostSummary(res *Result) (tpl, line string) {
	vms := 0
	for _, v := range res.VMs {
		if len(v.Fenced) > 0 {
			vms++
		}
	}
	outcome := "complete"
	if res.Err() != nil {
		outcome = "incomplete"
	}
	line = fmt.Sprintf("%s host %s: fenced %d client(s) of %d of the host's %d VM(s), %d whole address(es), %s, run %s",
		res.Time.Format(events.TimeFormat), res.Host, res.Fenced, vms, len(res.VMs), len(res.Whole), outcome, res.Run)
	fields := map[string]string{
		"TIME": res.Time.Format(events.TimeFormat), "RUN": res.Run, "VMS": fmt.Sprint(len(res.VMs)),
		"FENCED_VMS": fmt.Sprint(vms), "CLIENTS": fmt.Sprint(res.Fenced), "WHOLE_ADDRESS": strings.Join(res.Whole, " "),
		"HOST_IPS": strings.Join(res.HostIPs, " "), "RESULT": outcome, "SOURCE": Op,
	}
	if !res.Expire.IsZero() {
		fields["EXPIRE"] = res.Expire.Format(events.TimeFormat)
	}
	order := []string{"TIME", "RUN", "RESULT", "VMS", "FENCED_VMS", "CLIENTS", "HOST_IPS", "WHOLE_ADDRESS", "EXPIRE", "SOURCE"}
	return opennebula.HostFenceEvent(fields, order, line), line
}
