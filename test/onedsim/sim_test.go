package onedsim_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/OpenNebula/one/src/oca/go/src/goca"
	dyn "github.com/OpenNebula/one/src/oca/go/src/goca/dynamic"
	goerrs "github.com/OpenNebula/one/src/oca/go/src/goca/errors"
	"github.com/OpenNebula/one/src/oca/go/src/goca/parameters"

	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

const (
	user = "oneadmin"
	pass = "pw-0n3"
	auth = user + ":" + pass
)

func start(t *testing.T, vms ...onedsim.VM) *onedsim.Sim {
	t.Helper()
	sim := onedsim.New(auth)
	for _, v := range vms {
		if err := sim.Put(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// gocaCtl returns a goca controller talking to sim with credentials u:p.
func gocaCtl(sim *onedsim.Sim, u, p string) *goca.Controller {
	return goca.NewController(goca.NewClient(goca.NewConfig(u, p, sim.URL()), &http.Client{Timeout: 5 * time.Second}))
}

func oneClient(t *testing.T, sim *onedsim.Sim, timeout time.Duration) *opennebula.Client {
	t.Helper()
	f := filepath.Join(t.TempDir(), "one_auth")
	if err := os.WriteFile(f, []byte(auth+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := opennebula.New(sim.URL(), f, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func vm42() onedsim.VM {
	return onedsim.VM{
		ID: 42, Name: "web-42",
		History: []onedsim.History{
			{Seq: 0, Host: "node1", HostID: 1, DSID: 101, ETime: 1714551000, Action: 2},
			{Seq: 1, Host: "node2", HostID: 2, DSID: 101},
		},
		Disks: []onedsim.Disk{
			{ID: 0, ImageID: 7, CephHost: "10.0.0.1 10.0.0.2:6790", CephKey: "/etc/ceph/ceph.client.libvirt.keyring"},
			{ID: 1, ImageID: 12, Persistent: true},
			{ID: 2, ImageID: 13, Shareable: true},
			{ID: 3, Volatile: true},
			{ID: 4, ImageID: 20, ReadOnly: true, Persistent: true, Type: "RBD_CDROM"},
		},
		UserTemplate: onedsim.Template{{Name: "DESCRIPTION", Value: "web frontend"}},
	}
}

func TestInfoThroughGoca(t *testing.T) {
	sim := start(t, vm42())
	vm, err := gocaCtl(sim, user, pass).VM(42).Info(false)
	if err != nil {
		t.Fatal(err)
	}
	if vm.ID != 42 || vm.Name != "web-42" || vm.StateRaw != 3 || vm.LCMStateRaw != 3 || vm.UName != "oneadmin" {
		t.Errorf("VM = id %d name %q state %d/%d uname %q", vm.ID, vm.Name, vm.StateRaw, vm.LCMStateRaw, vm.UName)
	}
	if len(vm.HistoryRecords) != 2 || vm.HistoryRecords[1].Hostname != "node2" || vm.HistoryRecords[1].SEQ != 1 || vm.HistoryRecords[1].TMMad != "ceph" {
		t.Errorf("history = %+v", vm.HistoryRecords)
	}
	disks := vm.Template.GetVectors("DISK")
	if len(disks) != 5 {
		t.Fatalf("%d disks", len(disks))
	}
	if s, _ := disks[0].GetStr("SOURCE"); s != "one/one-7" {
		t.Errorf("disk 0 SOURCE = %q", s)
	}
	if d, _ := vm.UserTemplate.GetStr("DESCRIPTION"); d != "web frontend" {
		t.Errorf("DESCRIPTION = %q", d)
	}
}

func TestInfoThroughOpenNebulaClient(t *testing.T) {
	sim := start(t, vm42())
	got, err := oneClient(t, sim, 5*time.Second).VM(context.Background(), 42)
	if err != nil {
		t.Fatal(err)
	}
	mons := []string{"10.0.0.1:6789", "10.0.0.2:6790"}
	want := &opennebula.VMInfo{
		ID: 42, Name: "web-42", State: 3, LCMState: 3, Host: "node2", HostID: 2, Seq: 1, SystemDSID: 101, TMMadSystem: "ceph",
		Stime: onedsim.DefaultSTime, History: []opennebula.Placement{{Seq: 0, Host: "node1", Stime: onedsim.DefaultSTime}, {Seq: 1, Host: "node2", Stime: onedsim.DefaultSTime + 60}},
		Disks: []vmdisk.Disk{
			{ID: "0", Pool: "one", Name: "one-7-42-0", Monitors: mons, User: "libvirt", Keyring: "/etc/ceph/ceph.client.libvirt.keyring"},
			{ID: "1", Pool: "one", Name: "one-12", User: "libvirt"},
			{ID: "2", Pool: "one", Name: "one-13", User: "libvirt", Shareable: true},
			{ID: "3", Pool: "one", Name: "one-sys-42-3", User: "libvirt"},
			{ID: "4", Pool: "one", Name: "one-20", User: "libvirt", ReadOnly: true},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("VM() =\n%+v\nwant\n%+v", got, want)
	}
}

func userVectors(t *testing.T, sim *onedsim.Sim, id int, name string) []string {
	t.Helper()
	ut, _ := sim.UserTemplate(id)
	var ids []string
	for _, a := range ut.Get(name) {
		ids = append(ids, a.Vector["ID"])
	}
	return ids
}

func TestUpdateMergeAndReplace(t *testing.T) {
	sim := start(t, vm42())
	vc := gocaCtl(sim, user, pass).VM(42)

	// goca's own template rendering, repeated vector attributes included.
	tpl := dyn.NewTemplate()
	tpl.AddPair("X", "1")
	for _, id := range []string{"a", "b", "c"} {
		tpl.AddVector("E").AddPair("ID", id)
	}
	if err := vc.Update(tpl.String(), parameters.Merge); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(userVectors(t, sim, 42, "E"), ","); got != "a,b,c" {
		t.Errorf("E after first merge = %s", got)
	}
	// Merge replaces every E by the new set and keeps other attributes.
	if err := vc.Update("E = [ ID = \"c\" ]\nE = [ ID = \"d\" ]", parameters.Merge); err != nil {
		t.Fatal(err)
	}
	vm, err := vc.Info(false)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, v := range vm.UserTemplate.GetVectors("E") {
		id, _ := v.GetStr("ID")
		seen = append(seen, id)
	}
	x, _ := vm.UserTemplate.GetStr("X")
	desc, _ := vm.UserTemplate.GetStr("DESCRIPTION")
	if strings.Join(seen, ",") != "c,d" || x != "1" || desc != "web frontend" {
		t.Errorf("after second merge: E=%v X=%q DESCRIPTION=%q", seen, x, desc)
	}
	// Replace drops everything else.
	if err := vc.Update("ONLY = yes", parameters.Replace); err != nil {
		t.Fatal(err)
	}
	ut, _ := sim.UserTemplate(42)
	if ut.String() != "ONLY=\"yes\"\n" {
		t.Errorf("after replace:\n%s", ut.String())
	}
	ups := sim.Updates()
	if len(ups) != 3 || ups[0].Type != 1 || ups[2].Type != 0 || ups[1].VMID != 42 || !strings.Contains(ups[1].Template, `ID = "d"`) {
		t.Errorf("updates = %+v", ups)
	}
}

func responseError(t *testing.T, err error) *goerrs.ResponseError {
	t.Helper()
	var re *goerrs.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("err = %#v, want *errors.ResponseError", err)
	}
	return re
}

func TestOnedErrors(t *testing.T) {
	tests := []struct {
		name    string
		call    func(c *goca.Controller) error
		code    goerrs.OneErrCode
		message string
	}{
		{"no such VM", func(c *goca.Controller) error { _, err := c.VM(7).Info(false); return err },
			goerrs.OneNoExistsError, "[one.vm.info] Error getting virtual machine [7]."},
		{"update of a missing VM", func(c *goca.Controller) error { return c.VM(7).Update("A=1", parameters.Merge) },
			goerrs.OneNoExistsError, "[one.vm.update] Error getting virtual machine [7]."},
		{"update parse error", func(c *goca.Controller) error { return c.VM(42).Update("A = [ B = ", parameters.Merge) },
			goerrs.OneActionError, "[one.vm.update] Parse error: syntax error"},
		{"wrong update type", func(c *goca.Controller) error { return c.VM(42).Update("A=1", parameters.UpdateType(2)) },
			goerrs.OneXMLRPCAPIError, "[one.vm.update] Wrong update type"},
		{"pool filter out of range", func(c *goca.Controller) error { _, err := c.VMs().Info(-7); return err },
			goerrs.OneXMLRPCAPIError, "[one.vmpool.info] Incorrect filter_flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim := start(t, vm42())
			re := responseError(t, tc.call(gocaCtl(sim, user, pass)))
			if re.Code != tc.code || !strings.HasPrefix(re.Msg, tc.message) {
				t.Errorf("got [%s] %q, want [%s] %q...", re.Code, re.Msg, tc.code, tc.message)
			}
		})
	}
}

func TestAuthenticationFailure(t *testing.T) {
	sim := start(t, vm42())
	_, err := gocaCtl(sim, user, "wrong").VM(42).Info(false)
	re := responseError(t, err)
	if re.Code != goerrs.OneAuthenticationError || re.Msg != "[one.vm.info] User couldn't be authenticated, aborting call." {
		t.Errorf("got [%s] %q", re.Code, re.Msg)
	}
	if n := len(sim.Updates()); n != 0 {
		t.Errorf("%d updates recorded", n)
	}
}

func TestPoolInfo(t *testing.T) {
	done := onedsim.VM{ID: 50, State: onedsim.StateDone}
	other := onedsim.VM{ID: 43, UID: 5, Host: "node3", Disks: []onedsim.Disk{{ID: 0, ImageID: 9}}}
	sim := start(t, vm42(), other, done)
	ctl := gocaCtl(sim, user, pass)

	ext, err := ctl.VMs().InfoExtendedFilter(goca.NewVMFilterDefault())
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.VMs) != 2 || ext.VMs[0].ID != 42 || ext.VMs[1].ID != 43 {
		t.Fatalf("infoextended VMs = %d", len(ext.VMs))
	}
	if h := ext.VMs[0].HistoryRecords; len(h) != 1 || h[0].SEQ != 1 {
		t.Errorf("infoextended history = %+v, want only the last record", h)
	}
	if s, _ := ext.VMs[0].Template.GetVectors("DISK")[0].GetStr("SOURCE"); s != "one/one-7" {
		t.Errorf("infoextended DISK SOURCE = %q", s)
	}
	if d, _ := ext.VMs[0].UserTemplate.GetStr("DESCRIPTION"); d != "web frontend" {
		t.Errorf("infoextended user template lost DESCRIPTION")
	}

	short, err := ctl.VMs().Info()
	if err != nil {
		t.Fatal(err)
	}
	if len(short.VMs) != 2 {
		t.Fatalf("info VMs = %d", len(short.VMs))
	}
	d0 := short.VMs[0].Template.GetVectors("DISK")[0]
	if _, err := d0.GetStr("SOURCE"); err == nil {
		t.Errorf("one.vmpool.info DISK has SOURCE (oned's short form does not)")
	}
	if id, _ := d0.GetStr("IMAGE_ID"); id != "7" {
		t.Errorf("short DISK IMAGE_ID = %q", id)
	}
	if _, err := short.VMs[0].UserTemplate.GetStr("DESCRIPTION"); err == nil {
		t.Errorf("one.vmpool.info kept DESCRIPTION in the user template")
	}

	tests := []struct {
		name string
		f    *goca.VMFilter
		want []int
	}{
		{"one id", goca.NewVMFilter(-2, 43, 43, -1), []int{43}},
		{"from id", goca.NewVMFilter(-2, 43, -1, -1), []int{43, 50}[:1]},
		{"any state includes DONE", goca.NewVMFilter(-2, -1, -1, -2), []int{42, 43, 50}},
		{"only DONE", goca.NewVMFilter(-2, -1, -1, onedsim.StateDone), []int{50}},
		{"by owner", goca.NewVMFilter(5, -1, -1, -1), []int{43}},
		{"mine", goca.NewVMFilter(-3, -1, -1, -1), []int{42}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ctl.VMs().InfoExtendedFilter(tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int
			for _, v := range p.VMs {
				ids = append(ids, v.ID)
			}
			if !reflect.DeepEqual(ids, tc.want) {
				t.Errorf("ids = %v, want %v", ids, tc.want)
			}
		})
	}
}

func TestDownAndUp(t *testing.T) {
	sim := start(t, vm42())
	ctl := gocaCtl(sim, user, pass)
	if err := sim.SetDown(true); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err := ctl.VM(42).Info(false)
	var ce *goerrs.ClientError
	if !errors.As(err, &ce) || ce.Code != goerrs.ClientReqHTTP || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("while down: %v", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("refusal took %v", d)
	}
	if err := sim.SetDown(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.VM(42).Info(false); err != nil {
		t.Fatalf("after coming back up: %v", err)
	}
}

// A client with a 1s timeout gives up after about 1s on a slow oned.
func TestSlow(t *testing.T) {
	sim := start(t, vm42())
	sim.SetDelay(5 * time.Second)
	c := oneClient(t, sim, time.Second)
	t0 := time.Now()
	_, err := c.VM(context.Background(), 42)
	took := time.Since(t0)
	if !errors.Is(err, opennebula.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	if took < 900*time.Millisecond || took > 1800*time.Millisecond {
		t.Errorf("gave up after %v, want about 1s", took)
	}
	sim.SetDelay(100 * time.Millisecond)
	if _, err := c.VM(context.Background(), 42); err != nil {
		t.Errorf("a delay within the timeout fails: %v", err)
	}
}

func TestFailCalls(t *testing.T) {
	sim := start(t, vm42())
	ctl := gocaCtl(sim, user, pass)
	sim.SetFailCalls("one.vm.info", 2)
	for i := 0; i < 2; i++ {
		_, err := ctl.VM(42).Info(false)
		if re := responseError(t, err); re.Code != goerrs.OneInternalError || re.Msg != "[one.vm.info] Simulated failure." {
			t.Errorf("call %d: [%s] %q", i, re.Code, re.Msg)
		}
	}
	if _, err := ctl.VM(42).Info(false); err != nil {
		t.Errorf("third call: %v", err)
	}
	sim.SetFailCallsWith("one.vm.update", 1, onedsim.CodeLocked, "The resource virtual machine is locked. [42].")
	re := responseError(t, ctl.VM(42).Update("A=1", parameters.Merge))
	if re.Code != goerrs.OneLockedError {
		t.Errorf("code = %s", re.Code)
	}
	if ups := sim.Updates(); len(ups) != 1 || ups[0].Error == "" {
		t.Errorf("failed update not recorded: %+v", ups)
	}
	if got := sim.Calls("one.vm.info"); got != 3 {
		t.Errorf("Calls(one.vm.info) = %d", got)
	}
}

func TestUnknownMethodIsAFault(t *testing.T) {
	sim := start(t, vm42())
	c := goca.NewClient(goca.NewConfig(user, pass, sim.URL()), nil)
	_, err := c.Call("one.cluster.info", 0)
	var ce *goerrs.ClientError
	if !errors.As(err, &ce) || ce.Code != goerrs.ClientRespXMLRPCFault || !strings.Contains(err.Error(), "Method 'one.cluster.info' not defined") {
		t.Errorf("err = %v", err)
	}
	v, err := goca.NewController(c).SystemVersion()
	if err != nil || v != onedsim.Version {
		t.Errorf("SystemVersion = %q, %v", v, err)
	}
}

// The bytes on the wire are xmlrpc-c's.
func TestWireFormat(t *testing.T) {
	sim := start(t, vm42())
	call := func(body string) string {
		resp, err := http.Post(sim.URL(), "text/xml", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	req := func(method, session string, extra string) string {
		return `<?xml version="1.0"?><methodCall><methodName>` + method + `</methodName><params><param><value><string>` +
			session + `</string></value></param>` + extra + `</params></methodCall>`
	}
	tests := []struct{ name, body, want string }{
		{"success string", req("one.system.version", auth, ""),
			"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<methodResponse>\r\n<params>\r\n<param><value><array><data>\r\n" +
				"<value><boolean>1</boolean></value>\r\n<value><string>6.6.0</string></value>\r\n<value><i4>0</i4></value>\r\n" +
				"</data></array></value></param>\r\n</params>\r\n</methodResponse>\r\n"},
		{"success int", req("one.vm.update", auth, `<param><value><i4>42</i4></value></param><param><value><string>A=1</string></value></param><param><value><i4>1</i4></value></param>`),
			"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<methodResponse>\r\n<params>\r\n<param><value><array><data>\r\n" +
				"<value><boolean>1</boolean></value>\r\n<value><i4>42</i4></value>\r\n<value><i4>0</i4></value>\r\n" +
				"</data></array></value></param>\r\n</params>\r\n</methodResponse>\r\n"},
		{"failure", req("one.vm.info", "oneadmin:bad", `<param><value><i4>42</i4></value></param>`),
			"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<methodResponse>\r\n<params>\r\n<param><value><array><data>\r\n" +
				"<value><boolean>0</boolean></value>\r\n<value><string>[one.vm.info] User couldn't be authenticated, aborting call.</string></value>\r\n" +
				"<value><i4>256</i4></value>\r\n<value><i4>-1</i4></value>\r\n<value><i8>0</i8></value>\r\n" +
				"</data></array></value></param>\r\n</params>\r\n</methodResponse>\r\n"},
		{"type mismatch", req("one.vm.info", auth, `<param><value><string>42</string></value></param>`),
			"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<methodResponse>\r\n<fault>\r\n<value><struct>\r\n" +
				"<member><name>faultCode</name>\r\n<value><i4>-501</i4></value></member>\r\n" +
				"<member><name>faultString</name>\r\n<value><string>Type mismatch: parameter 1 of one.vm.info</string></value></member>\r\n" +
				"</struct></value>\r\n</fault>\r\n</methodResponse>\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := call(tc.body); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	// The VM document inside a success answer is escaped, not CDATA'd.
	got := call(req("one.vm.info", auth, `<param><value><i4>42</i4></value></param>`))
	if !strings.Contains(got, "<value><string>&lt;VM&gt;&lt;ID&gt;42&lt;/ID&gt;") {
		t.Errorf("vm.info answer: %.200q", got)
	}
}
