// Package hostfence is rbdfence's host fence for OpenNebula's HA hook (HA
// without a BMC): it decides whether a host may be fenced, then blocklists,
// in every Ceph cluster involved, every client instance of the VMs placed on
// it (through engine.FenceHost), and returns what it did with the audit
// records and events to publish. It does not print; the CLI logs.
package hostfence

import (
	"fmt"
	"time"

	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// DefaultQuiet is how long a host must have been silent (no monitoring
// received by oned) before it may be fenced.
const DefaultQuiet = 2 * time.Minute

// RefusedError says why a host is not fenced: it is not failed in oned's
// eyes, or it still reports. Fencing it would cut off running VMs.
type RefusedError struct {
	Host   string
	HostID int
	Reason string
}

// Outcome is outcome.Refused (exit 4): nothing was fenced.
func (e *RefusedError) Outcome() outcome.Kind { return outcome.Refused }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("host %s (%d) not fenced: %s", e.Host, e.HostID, e.Reason)
}

// Eligible refuses a host that is not in ERROR or OFFLINE, or that oned heard
// from (MONITORING/TIMESTAMP) less than quiet before now: a monitoring glitch
// must never fence a healthy host's running VMs. OpenNebula's HA hook calls
// the fence only for a host in ERROR (share/hooks/ft/host_error.rb:199 in
// release-7.4.0 re-reads the host and gives up when it came back).
func Eligible(h *opennebula.HostInfo, now time.Time, quiet time.Duration) error {
	if h.State != opennebula.HostError && h.State != opennebula.HostOffline {
		return &RefusedError{Host: h.Name, HostID: h.ID, Reason: fmt.Sprintf("its state is %s; only a host in ERROR or OFFLINE is fenced", opennebula.HostStateName(h.State))}
	}
	if !h.LastMonitored.IsZero() {
		if ago := now.Sub(h.LastMonitored); ago < quiet {
			return &RefusedError{Host: h.Name, HostID: h.ID, Reason: fmt.Sprintf("it still reports to oned (last monitoring %s ago, at %s; a failed host is silent for %s): retry when it has been silent that long",
				ago.Round(time.Second), h.LastMonitored.UTC().Format(time.RFC3339), quiet)}
		}
	}
	return nil
}
