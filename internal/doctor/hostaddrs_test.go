package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

// TestCheckHostAddrs: a KVM host whose fence-host would know no address
// (its name does not resolve, its template names none) is flagged with the
// fix; so is a bad attribute; an attribute or a resolving name passes; an
// OFFLINE host is not a host the HA hook fences.
func TestCheckHostAddrs(t *testing.T) {
	const auth = "oneadmin:doctor"
	sim := onedsim.New(auth)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "one_auth"), []byte(auth+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile = sim.URL(), filepath.Join(dir, "one_auth")
	cfg.Timeouts.Oned = config.Duration(5 * time.Second)
	attr := func(v string) onedsim.Template {
		tpl, err := onedsim.ParseTemplate("RBDFENCE_HOST_ADDRESSES = \"" + v + "\"\n")
		if err != nil {
			t.Fatal(err)
		}
		return tpl
	}
	sim.PutHost(onedsim.Host{ID: 1, Name: "node1.invalid", State: onedsim.HostMonitored, Template: attr("10.0.1.5 fd00::5")})
	sim.PutHost(onedsim.Host{ID: 2, Name: "10.0.2.7", State: onedsim.HostMonitored})
	sim.PutHost(onedsim.Host{ID: 3, Name: "gone.invalid", State: onedsim.HostOffline})
	if r := checkHostAddrs(t.Context(), dir, cfg); !r.OK || !strings.Contains(r.Detail, "2 KVM host(s)") || !strings.Contains(r.Detail, "10.0.2.7 by name") {
		t.Fatalf("every host known: %+v", r)
	}
	sim.PutHost(onedsim.Host{ID: 4, Name: "node4.invalid", State: onedsim.HostError})
	r := checkHostAddrs(t.Context(), dir, cfg)
	if r.OK || !strings.Contains(r.Detail, "fence-host of node4.invalid would be incomplete") || !strings.Contains(r.Fix, "RBDFENCE_HOST_ADDRESSES") {
		t.Fatalf("a host without addresses: %+v", r)
	}
	sim.PutHost(onedsim.Host{ID: 4, Name: "node4.invalid", State: onedsim.HostError, Template: attr("10.0.4.4, node4")})
	if r := checkHostAddrs(t.Context(), dir, cfg); r.OK || !strings.Contains(r.Detail, `"node4" is not an IP address`) {
		t.Fatalf("a bad attribute: %+v", r)
	}
	sim.PutHost(onedsim.Host{ID: 4, Name: "node4.invalid", State: onedsim.HostError, Template: attr("10.0.4.4")})
	if r := checkHostAddrs(t.Context(), dir, cfg); !r.OK {
		t.Fatalf("fixed: %+v", r)
	}
	// Two hosts behind one NAT toward Ceph, its address given to both.
	sim.PutHost(onedsim.Host{ID: 5, Name: "node5.invalid", State: onedsim.HostMonitored, Template: attr("203.0.113.9")})
	sim.PutHost(onedsim.Host{ID: 4, Name: "node4.invalid", State: onedsim.HostError, Template: attr("10.0.4.4 203.0.113.9")})
	if r := checkHostAddrs(t.Context(), dir, cfg); r.OK || !strings.Contains(r.Detail, "hosts node4.invalid and node5.invalid both have address 203.0.113.9") || r.Fix == "" {
		t.Fatalf("one address on two hosts: %+v", r)
	}
	cfg.OpenNebula.Endpoint = "http://127.0.0.1:1/RPC2"
	if r := checkHostAddrs(t.Context(), dir, cfg); r.OK || !strings.Contains(r.Detail, "cannot list the hosts") {
		t.Fatalf("oned down: %+v", r)
	}
}
