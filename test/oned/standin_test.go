package oned

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

// The stand-in (test/onedsim) stays for the faults a real oned does not
// produce on demand (one.vm.update failing, oned down or slow mid-step).
// TestStandInMatchesOned checks each behaviour of it that rbdfence relies on
// against the real oned 7.4.0: the same XML-RPC bytes to both, the answers
// compared.
func TestStandInMatchesOned(t *testing.T) {
	t.Parallel()
	s := Start(t, "fe74")
	auth, err := os.ReadFile(filepath.Join(s.dir, s.FE, "fs/root/.one/one_auth"))
	if err != nil {
		t.Fatal(err)
	}
	session := strings.TrimSpace(string(auth))
	real := fmt.Sprintf("http://127.0.0.1:%d/RPC2", s.Port0())

	// A real VM (PENDING: oned's full document, disks from the Ceph
	// datastore), loaded into the stand-in as one.vm.info returns it.
	img := s.NewImage(t, "standin", true)
	vm := s.NewVM(t, VMTemplate("standin", img))
	doc := okBody(t, call(t, real, "one.vm.info", session, vm, false))
	sim := onedsim.New(session)
	if err := sim.AddVM([]byte(doc)); err != nil {
		t.Fatalf("the stand-in does not load oned's one.vm.info document: %v", err)
	}
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	stand := sim.URL()

	both := func(method string, params ...any) (r, st []any) {
		t.Helper()
		return asArray(t, call(t, real, method, params...)), asArray(t, call(t, stand, method, params...))
	}

	t.Run("authentication failure", func(t *testing.T) {
		r, st := both("one.vm.info", "oneadmin:wrong", vm, false)
		sameFailure(t, r, st)
	})
	t.Run("no such VM", func(t *testing.T) {
		r, st := both("one.vm.info", session, 987654, false)
		sameFailure(t, r, st)
	})
	t.Run("update merge replaces attributes by name", func(t *testing.T) {
		// As rbdfence's event recorder writes (internal/opennebula events):
		// the vector attributes of one name as a set, and single ones.
		updates := []string{
			"RBDFENCE_COLLISIONS = \"1\"\nRBDFENCE_EVENT_20261130T092210Z_5B7C0D1E2F3A4B5C = [ ID = \"e1\", ADDRESS = \"10.0.0.5:0/1\", ACTION = \"blocklisted+unlocked\" ]\n",
			"RBDFENCE_COLLISIONS = \"2\"\nRBDFENCE_EVENT_20261130T092211Z_0000000000000002 = [ ID = \"e2\", ADDRESS = \"10.0.0.6:0/2\", IMAGE = \"one/one-7\" ]\nRBDFENCE_LAST_COLLISION = \"x \\\"quoted\\\" y\"\n",
			// an empty vector erases the attribute (how rbdfence drops old events)
			"RBDFENCE_EVENT_20261130T092210Z_5B7C0D1E2F3A4B5C = [ ]\n",
			// the single name older versions wrote, several times
			"RBDFENCE_EVENT = [ ID = \"e3\" ]\nRBDFENCE_EVENT = [ ID = \"e4\" ]\n",
			"<TEMPLATE><RBDFENCE_COLLISIONS>3</RBDFENCE_COLLISIONS></TEMPLATE>",
		}
		for i, u := range updates {
			r, st := both("one.vm.update", session, vm, u, 1)
			if r[0] != st[0] {
				t.Fatalf("update %d: oned %v, stand-in %v", i, r, st)
			}
			rt := userTemplate(t, okBody(t, call(t, real, "one.vm.info", session, vm, false)))
			sd := userTemplate(t, okBody(t, call(t, stand, "one.vm.info", session, vm, false)))
			if !reflect.DeepEqual(rt, sd) {
				t.Fatalf("user template after update %d:\noned:     %v\nstand-in: %v", i, rt, sd)
			}
		}
	})
	t.Run("update parse error", func(t *testing.T) {
		// The code, and the message up to where bison's own wording starts.
		r, st := both("one.vm.update", session, vm, "RBDFENCE_EVENT = [ ID = \"x\"", 1)
		sameFailurePrefix(t, r, st, "[one.vm.update] Parse error: syntax error")
	})
	t.Run("update errors", func(t *testing.T) {
		r, st := both("one.vm.update", session, 987654, "A = \"1\"", 1)
		sameFailure(t, r, st)
		r, st = both("one.vm.update", session, vm, "A = \"1\"", 2)
		sameFailure(t, r, st)
	})
	t.Run("pool filter out of range", func(t *testing.T) {
		r, st := both("one.vmpool.info", session, -7, -1, -1, -1)
		sameFailure(t, r, st)
	})
	t.Run("host document", func(t *testing.T) {
		// fence-host reads a host through internal/opennebula ParseHost:
		// the stand-in's document of the same host must read the same.
		id, err := s.HostID(s.Hosts[0].Name)
		if err != nil {
			t.Fatal(err)
		}
		rdoc := okBody(t, call(t, real, "one.host.info", session, id, false))
		rh, err := opennebula.ParseHost([]byte(rdoc))
		if err != nil {
			t.Fatalf("ParseHost of oned's one.host.info: %v", err)
		}
		sim.PutHost(onedsim.Host{ID: rh.ID, Name: rh.Name, State: rh.State, LastMonitored: rh.LastMonitored,
			Template: onedsim.Template{{Name: opennebula.AttrHostAddresses, Value: "10.78.0.11 fd00::11"}}})
		r, st := both("one.host.update", session, id, opennebula.AttrHostAddresses+" = \"10.78.0.11 fd00::11\"", 1)
		if r[0] != st[0] {
			t.Fatalf("one.host.update: oned %v, stand-in %v", r, st)
		}
		rh, err = opennebula.ParseHost([]byte(okBody(t, call(t, real, "one.host.info", session, id, false))))
		if err != nil {
			t.Fatal(err)
		}
		sh, err := opennebula.ParseHost([]byte(okBody(t, call(t, stand, "one.host.info", session, id, false))))
		if err != nil {
			t.Fatalf("ParseHost of the stand-in's one.host.info: %v", err)
		}
		rh.VMs, sh.VMs = nil, nil // the real host runs other tests' VMs
		if !reflect.DeepEqual(rh, sh) {
			t.Fatalf("host %d read from\noned:     %+v\nstand-in: %+v", id, rh, sh)
		}
		r, st = both("one.host.info", session, 987654, false)
		sameFailure(t, r, st)
	})
	t.Run("VM document", func(t *testing.T) {
		// The stand-in's own VM builder (VM{...}.XML(), what the unit tests
		// serve) given what oned wrote for this VM's disk must read the same
		// through ParseVM: the same RBD images, users, secrets, monitors.
		rv, err := opennebula.ParseVM([]byte(doc))
		if err != nil {
			t.Fatalf("ParseVM of oned's one.vm.info: %v", err)
		}
		var d struct {
			Disks []struct {
				Inner []byte `xml:",innerxml"`
			} `xml:"TEMPLATE>DISK"`
			TMS string `xml:"TEMPLATE>TM_MAD_SYSTEM"`
		}
		if err := xml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		sv := onedsim.VM{ID: rv.ID, Name: rv.Name, State: rv.State, LCMState: rv.LCMState, STime: rv.Stime, TMMadSystem: d.TMS}
		for _, dk := range d.Disks {
			a := map[string]string{}
			for _, kv := range attrs(t, dk.Inner) {
				k, v, _ := strings.Cut(kv, "=")
				a[k] = v
			}
			num := func(k string) int {
				n, err := strconv.Atoi(a[k])
				if err != nil {
					t.Fatalf("oned's DISK %s = %q: %v", k, a[k], err)
				}
				return n
			}
			sv.Disks = append(sv.Disks, onedsim.Disk{ID: num("DISK_ID"), ImageID: num("IMAGE_ID"), Image: a["IMAGE"],
				Persistent: a["CLONE"] == "NO", Pool: a["POOL_NAME"], CephHost: a["CEPH_HOST"], CephUser: a["CEPH_USER"],
				CephSecret: a["CEPH_SECRET"], DatastoreID: num("DATASTORE_ID"), Datastore: a["DATASTORE"], TMMad: a["TM_MAD"],
				Target: a["TARGET"], Size: num("SIZE")})
		}
		got, err := opennebula.ParseVM([]byte(sv.XML()))
		if err != nil {
			t.Fatalf("ParseVM of the stand-in's document: %v", err)
		}
		if !reflect.DeepEqual(rv, got) {
			t.Fatalf("VM %d read from\noned:     %+v\nstand-in: %+v", vm, rv, got)
		}
	})
	t.Run("system version", func(t *testing.T) {
		// rbdfence doctor prints it: both answer [true, "MAJOR.MINOR.PATCH", 0].
		r, st := both("one.system.version", session)
		for who, a := range map[string][]any{"oned": r, "stand-in": st} {
			v := okBodyOf(t, a)
			if !versionRe.MatchString(v) || len(a) < 3 || a[2] != r[2] {
				t.Errorf("%s answers %v", who, a)
			}
		}
	})
	t.Run("host pool", func(t *testing.T) {
		// fence-host finds a host by name in one.hostpool.info: the stand-in's
		// pool of the same host must list it as oned's does.
		id, err := s.HostID(s.Hosts[0].Name)
		if err != nil {
			t.Fatal(err)
		}
		rh, err := opennebula.ParseHost([]byte(okBody(t, call(t, real, "one.host.info", session, id, false))))
		if err != nil {
			t.Fatal(err)
		}
		sim.PutHost(onedsim.Host{ID: rh.ID, Name: rh.Name, State: rh.State, LastMonitored: rh.LastMonitored})
		rp, sp := both("one.hostpool.info", session)
		rn, sn := hostNames(t, okBodyOf(t, rp)), hostNames(t, okBodyOf(t, sp))
		if rn[rh.Name] != rh.ID || sn[rh.Name] != rh.ID {
			t.Fatalf("host %s (%d) in the pools:\noned:     %v\nstand-in: %v", rh.Name, rh.ID, rn, sn)
		}
	})
	t.Run("pool documents", func(t *testing.T) {
		// one.vmpool.info's short VMs carry no DISK SOURCE (rbdfence reads
		// disks with one.vm.info or infoextended), infoextended does.
		for _, m := range []string{"one.vmpool.info", "one.vmpool.infoextended"} {
			r, st := both(m, session, -2, vm, vm, -1)
			rd, sd := diskKeys(t, okBodyOf(t, r)), diskKeys(t, okBodyOf(t, st))
			if !reflect.DeepEqual(rd, sd) {
				t.Errorf("%s: DISK attributes\noned:     %v\nstand-in: %v", m, rd, sd)
			}
		}
	})
}

var versionRe = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// hostNames: the HOST_POOL's hosts, name to ID.
func hostNames(t *testing.T, pool string) map[string]int {
	t.Helper()
	var p struct {
		Hosts []struct {
			ID   int    `xml:"ID"`
			Name string `xml:"NAME"`
		} `xml:"HOST"`
	}
	if err := xml.Unmarshal([]byte(pool), &p); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, h := range p.Hosts {
		out[h.Name] = h.ID
	}
	return out
}

func call(t *testing.T, url, method string, params ...any) any {
	t.Helper()
	v, err := Call(url, method, params...)
	if err != nil {
		t.Fatalf("%s on %s: %v", method, url, err)
	}
	return v
}

func asArray(t *testing.T, v any) []any {
	t.Helper()
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		t.Fatalf("answer %#v is not oned's array", v)
	}
	return a
}

func okBody(t *testing.T, v any) string { t.Helper(); return okBodyOf(t, asArray(t, v)) }

func okBodyOf(t *testing.T, a []any) string {
	t.Helper()
	if ok, _ := a[0].(bool); !ok {
		t.Fatalf("call failed: %v", a)
	}
	s, ok := a[1].(string)
	if !ok {
		t.Fatalf("answer body %#v is not a string", a[1])
	}
	return s
}

// sameFailure: both answer [false, message, code, ...] with the same message
// and code.
func sameFailure(t *testing.T, r, st []any) {
	t.Helper()
	if len(r) < 3 || len(st) < 3 {
		t.Fatalf("answers too short: oned %v, stand-in %v", r, st)
	}
	if r[0] != false || st[0] != false {
		t.Fatalf("want failures: oned %v, stand-in %v", r, st)
	}
	if r[1] != st[1] || r[2] != st[2] {
		t.Fatalf("failure differs:\noned:     %q code %v\nstand-in: %q code %v", r[1], r[2], st[1], st[2])
	}
}

// sameFailurePrefix: both fail with the same code, and both messages
// start with prefix.
func sameFailurePrefix(t *testing.T, r, st []any, prefix string) {
	t.Helper()
	if len(r) < 3 || len(st) < 3 || r[0] != false || st[0] != false {
		t.Fatalf("want failures: oned %v, stand-in %v", r, st)
	}
	rm, _ := r[1].(string)
	sm, _ := st[1].(string)
	if r[2] != st[2] || !strings.HasPrefix(rm, prefix) || !strings.HasPrefix(sm, prefix) {
		t.Fatalf("failure differs (want code alike and both messages starting %q):\noned:     %q code %v\nstand-in: %q code %v", prefix, rm, r[2], sm, st[2])
	}
}

// userTemplate is the VM's USER_TEMPLATE as a sorted list of "NAME=value"
// and "NAME=[K=v,...]" entries.
func userTemplate(t *testing.T, doc string) []string {
	t.Helper()
	var v struct {
		UT struct {
			Inner []byte `xml:",innerxml"`
		} `xml:"USER_TEMPLATE"`
	}
	if err := xml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	return attrs(t, v.UT.Inner)
}

// attrs flattens OpenNebula template XML (one level of vectors).
func attrs(t *testing.T, inner []byte) []string {
	t.Helper()
	type node struct {
		XMLName xml.Name
		Text    string `xml:",chardata"`
		Kids    []node `xml:",any"`
	}
	var n node
	if err := xml.Unmarshal(append(append([]byte("<X>"), inner...), "</X>"...), &n); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range n.Kids {
		if len(k.Kids) == 0 {
			out = append(out, k.XMLName.Local+"="+strings.TrimSpace(k.Text))
			continue
		}
		var sub []string
		for _, kk := range k.Kids {
			sub = append(sub, kk.XMLName.Local+"="+strings.TrimSpace(kk.Text))
		}
		sort.Strings(sub)
		out = append(out, k.XMLName.Local+"=["+strings.Join(sub, ",")+"]")
	}
	sort.Strings(out)
	return out
}

// diskKeys: the attribute names of the DISKs of the pool document's VMs.
func diskKeys(t *testing.T, pool string) []string {
	t.Helper()
	var p struct {
		VMs []struct {
			Disks []struct {
				Inner []byte `xml:",innerxml"`
			} `xml:"TEMPLATE>DISK"`
		} `xml:"VM"`
	}
	if err := xml.Unmarshal([]byte(pool), &p); err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, v := range p.VMs {
		for j, d := range v.Disks {
			for _, a := range attrs(t, d.Inner) {
				name, _, _ := strings.Cut(a, "=")
				out = append(out, strconv.Itoa(i)+"."+strconv.Itoa(j)+"."+name)
			}
		}
	}
	sort.Strings(out)
	return out
}
