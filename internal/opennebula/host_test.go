package opennebula_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

// TestHosts: one.host.info, one.hostpool.info, the VMs placed on a host
// (last HISTORY), and one.host.update in merge mode, through goca against
// the oned stand-in.
func TestHosts(t *testing.T) {
	sim := startSim(t,
		onedsim.VM{ID: 1, Host: "node1", HostID: 3, Seq: 2},
		onedsim.VM{ID: 2, Host: "node2", HostID: 4, Seq: 0},
		onedsim.VM{ID: 3, History: []onedsim.History{{Seq: 0, Host: "node2", HostID: 4}, {Seq: 1, Host: "node1", HostID: 3}}},
		onedsim.VM{ID: 4, Host: "node1", HostID: 3, Seq: 1, State: onedsim.StateDone, LCMState: onedsim.LCMInit},
	)
	last := time.Unix(1764590000, 0).UTC()
	sim.PutHost(onedsim.Host{ID: 3, Name: "node1", State: onedsim.HostError, LastMonitored: last})
	sim.PutHost(onedsim.Host{ID: 4, Name: "node2", State: onedsim.HostMonitored})
	c := newClient(t, sim, 5*time.Second)
	ctx := context.Background()

	h, err := c.Host(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != 3 || h.Name != "node1" || h.State != opennebula.HostError || !h.LastMonitored.Equal(last) || len(h.VMs) != 2 || h.VMs[0] != 1 || h.VMs[1] != 3 {
		t.Fatalf("host 3: %+v", h)
	}
	h, err = c.HostByName(ctx, "node2")
	if err != nil || h.ID != 4 || !h.LastMonitored.IsZero() || h.State != opennebula.HostMonitored {
		t.Fatalf("node2 (never monitored: <MONITORING/>): %+v %v", h, err)
	}
	if h, err := c.HostByName(ctx, "3"); err != nil || h.Name != "node1" {
		t.Fatalf("host by id: %+v %v", h, err)
	}
	if _, err := c.HostByName(ctx, "node9"); !errors.Is(err, opennebula.ErrNotFound) || !strings.Contains(err.Error(), "node9") {
		t.Fatalf("unknown host: %v", err)
	}
	if _, err := c.Host(ctx, 99); !errors.Is(err, opennebula.ErrNotFound) {
		t.Fatalf("unknown host id: %v", err)
	}
	vms, err := c.VMsOnHost(ctx, "node1")
	if err != nil || len(vms) != 2 || vms[0].ID != 1 || vms[1].ID != 3 || vms[1].Seq != 1 {
		t.Fatalf("VMs on node1 (not DONE, last HISTORY): %v %v", vms, err)
	}
	for i := 0; i < 2; i++ {
		if err := c.UpdateHostTemplate(ctx, 3, opennebula.HostFenceEvent(map[string]string{"RUN": "r1", "RESULT": `a "b"`}, []string{"RUN", "RESULT"}, "summary")); err != nil {
			t.Fatal(err)
		}
	}
	tpl, _ := sim.HostTemplate(3)
	if s := tpl.String(); strings.Count(s, "RBDFENCE_HOST_FENCE") != 1 || !strings.Contains(s, `RESULT="a 'b'"`) || !strings.Contains(s, `RBDFENCE_LAST_HOST_FENCE="summary"`) {
		t.Fatalf("host template after two merges:\n%s", s)
	}
}

func TestParseHostBad(t *testing.T) {
	for _, doc := range []string{"", "<VM><ID>1</ID></VM>", "<HOST><ID>x</ID></HOST>", "<HOST><ID>1</ID><NAME>a</NAME></HOST>",
		"<HOST><ID>1</ID><NAME></NAME><STATE>3</STATE></HOST>", "<HOST><ID>1</ID><NAME>a</NAME><STATE>3</STATE><MONITORING><TIMESTAMP>z</TIMESTAMP></MONITORING></HOST>"} {
		if _, err := opennebula.ParseHost([]byte(doc)); err == nil {
			t.Errorf("ParseHost(%q) accepted", doc)
		}
	}
}
