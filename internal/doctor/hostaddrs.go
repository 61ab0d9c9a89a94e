package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hostaddrs"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// hostAddrsParallel bounds the name lookups in flight.
const hostAddrsParallel = 16

// checkHostAddrs: for every KVM host (not OFFLINE), fence-host must know
// the addresses Ceph sees for its clients without arguments, since
// OpenNebula's HA hook passes none (share/hooks/ft/host_error.rb:210-222 of
// release-7.4.0): the host template's RBDFENCE_HOST_ADDRESSES, else its
// name resolved. A host with neither would get an incomplete fence (no
// reschedule) for every VM whose claim records no address of it; a bad
// attribute would refuse the fence outright.
func checkHostAddrs(ctx context.Context, root string, cfg *config.Config) Result {
	r := Result{Check: "host-fence-addresses"}
	pool, names, err := kvmHosts(ctx, root, cfg)
	if err != nil {
		r.Detail, r.Fix = "cannot list the hosts: "+oneLine(err.Error()), "see the oned check"
		return r
	}
	byName := map[string]*opennebula.HostInfo{}
	for i := range pool {
		byName[pool[i].Name] = &pool[i].HostInfo
	}
	type answer struct {
		ips  []netip.Addr
		from string
		err  error
	}
	answers := make([]answer, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, hostAddrsParallel)
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ips, from, err := hostaddrs.Of(ctx, byName[n], nil)
			answers[i] = answer{ips, from, err}
		}()
	}
	wg.Wait()
	var bad, none, fromName []string
	byHost := map[string][]netip.Addr{}
	for i, n := range names {
		byHost[n] = answers[i].ips
		switch a := answers[i]; {
		case a.err != nil:
			bad = append(bad, oneLine(a.err.Error()))
		case a.from == hostaddrs.FromNothing:
			none = append(none, n)
		case a.from == hostaddrs.FromName:
			fromName = append(fromName, n)
		}
	}
	set := fmt.Sprintf("onehost update HOST --append with %s=\"<the IPs its Ceph clients use>\"", opennebula.AttrHostAddresses)
	a, b, shared, twice := hostaddrs.Shared(byHost)
	switch {
	case twice:
		r.Detail = fmt.Sprintf("hosts %s and %s both have address %s: fence-host of either would fence the other's clients, and it refuses (hosts behind one NAT toward Ceph? README: Hosts behind NAT)", a, b, shared)
		r.Fix = "give each host its own address toward Ceph, and in " + opennebula.AttrHostAddresses + " only its own"
	case len(bad) > 0:
		r.Detail, r.Fix = "fence-host would refuse: "+strings.Join(bad, "; "), "correct the attribute: "+set
	case len(none) > 0:
		r.Detail = fmt.Sprintf("fence-host of %s would be incomplete for every VM whose claim records no address there (the HA hook passes no --host-addr): the name does not resolve and the template has no %s",
			strings.Join(none, ", "), opennebula.AttrHostAddresses)
		r.Fix = set
	default:
		r.OK = true
		r.Detail = fmt.Sprintf("%d KVM host(s): every fence-host knows the host's addresses", len(names))
		if len(fromName) > 0 {
			r.Detail += fmt.Sprintf(" (%s by name: if Ceph sees its clients with another address, set %s)", strings.Join(fromName, ", "), opennebula.AttrHostAddresses)
		}
	}
	return r
}
