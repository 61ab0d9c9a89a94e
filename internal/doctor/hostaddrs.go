package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/frontend"
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
	c, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	var pool []opennebula.PoolHost
	if err == nil {
		pool, err = c.Hosts(ctx)
	}
	if err != nil {
		r.Detail, r.Fix = "cannot list the hosts: "+oneLine(err.Error()), "see the oned check"
		return r
	}
	mads := frontend.DefaultKVMMads
	if b, err := os.ReadFile(filepath.Join(root, "etc/one/oned.conf")); err == nil {
		if m := frontend.KVMMads(b); len(m) > 0 {
			mads = m
		}
	}
	names, _ := frontend.KVMHosts(pool, mads, nil)
	byName := map[string]*opennebula.HostInfo{}
	for i := range pool {
		byName[pool[i].Name] = &pool[i].HostInfo
	}
	type answer struct {
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
			_, from, err := hostaddrs.Of(ctx, byName[n], nil)
			answers[i] = answer{from, err}
		}()
	}
	wg.Wait()
	var bad, none, fromName []string
	for i, n := range names {
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
	switch {
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
