package opennebula_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

const (
	simUser = "oneadmin"
	simPass = "s3cr3t-Pa55"
	simAuth = simUser + ":" + simPass
)

func authFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "one_auth")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startSim runs an oned stand-in with the given VMs.
func startSim(t *testing.T, vms ...onedsim.VM) *onedsim.Sim {
	t.Helper()
	sim := onedsim.New(simAuth)
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

func newClient(t *testing.T, sim *onedsim.Sim, timeout time.Duration) *opennebula.Client {
	t.Helper()
	c, err := opennebula.New(sim.URL(), authFile(t, simAuth+"\n"), timeout)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNew(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string
		auth     *string // nil: no file
		timeout  time.Duration
		wantErr  string
	}{
		{name: "ok", endpoint: "http://127.0.0.1:2633/RPC2", auth: ptr("oneadmin:pw\n"), timeout: time.Second},
		{name: "ok CRLF and extra lines", endpoint: "https://one.example.com:2633/RPC2", auth: ptr("oneadmin:pw\r\nignored\n"), timeout: time.Second},
		{name: "password with colon", endpoint: "http://h:2633/RPC2", auth: ptr("u:p:w"), timeout: time.Second},
		{name: "missing file", endpoint: "http://h:2633/RPC2", timeout: time.Second, wantErr: "no such file"},
		{name: "empty file", endpoint: "http://h:2633/RPC2", auth: ptr("\n"), timeout: time.Second, wantErr: "file is empty"},
		{name: "no colon", endpoint: "http://h:2633/RPC2", auth: ptr("justapassword-XYZ"), timeout: time.Second, wantErr: "want one line user:password"},
		{name: "empty password", endpoint: "http://h:2633/RPC2", auth: ptr("user:"), timeout: time.Second, wantErr: "want one line user:password"},
		{name: "empty user", endpoint: "http://h:2633/RPC2", auth: ptr(":pw-XYZ"), timeout: time.Second, wantErr: "want one line user:password"},
		{name: "bad endpoint", endpoint: "localhost:2633", auth: ptr("u:p"), timeout: time.Second, wantErr: "want http(s)://"},
		{name: "endpoint credentials redacted", endpoint: "ftp://u:hunter2-XYZ@h/RPC2", auth: ptr("u:p"), timeout: time.Second, wantErr: "want http(s)://"},
		{name: "zero timeout", endpoint: "http://h:2633/RPC2", auth: ptr("u:p"), wantErr: "must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "missing")
			if tc.auth != nil {
				path = authFile(t, *tc.auth)
			}
			c, err := opennebula.New(tc.endpoint, path, tc.timeout)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if c.Endpoint() != tc.endpoint {
					t.Errorf("Endpoint() = %q", c.Endpoint())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error = %v, want %q", err, tc.wantErr)
			}
			for _, secret := range []string{"XYZ", "hunter2"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error reveals a secret: %q", err)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestFromEnv(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".one"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".one", "one_auth"), []byte("oneadmin:pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, oneAuth, oneXMLRPC, wantEndpoint, wantErr string
	}{
		{name: "defaults", wantEndpoint: opennebula.DefaultEndpoint},
		{name: "ONE_XMLRPC", oneXMLRPC: "http://10.1.1.1:2633/RPC2", wantEndpoint: "http://10.1.1.1:2633/RPC2"},
		{name: "ONE_AUTH", oneAuth: authFile(t, "serveradmin:pw2"), wantEndpoint: opennebula.DefaultEndpoint},
		{name: "ONE_AUTH missing", oneAuth: filepath.Join(home, "nope"), wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HOME", home)
			t.Setenv("ONE_AUTH", tc.oneAuth)
			t.Setenv("ONE_XMLRPC", tc.oneXMLRPC)
			c, err := opennebula.FromEnv(time.Second)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FromEnv error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Endpoint() != tc.wantEndpoint {
				t.Errorf("Endpoint() = %q, want %q", c.Endpoint(), tc.wantEndpoint)
			}
		})
	}
}

func TestClientNeverPrintsPassword(t *testing.T) {
	c, err := opennebula.New("http://127.0.0.1:1/RPC2", authFile(t, simAuth), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(f, c); strings.Contains(s, simPass) {
			t.Errorf("%s of the client shows the password: %s", f, s)
		}
	}
}

func vm42() onedsim.VM {
	return onedsim.VM{
		ID: 42, Name: "web-42", Host: "node2", HostID: 2, Seq: 1, SystemDSID: 101,
		Disks: []onedsim.Disk{
			{ID: 0, ImageID: 7, CephHost: "10.0.0.1 10.0.0.2:6790"},
			{ID: 1, ImageID: 12, Persistent: true},
			{ID: 2, Volatile: true, Pool: "one-sys"},
		},
		UserTemplate: onedsim.Template{{Name: "DESCRIPTION", Value: "web frontend"}},
	}
}

func TestVMFromSim(t *testing.T) {
	sim := startSim(t, vm42())
	c := newClient(t, sim, 5*time.Second)
	got, err := c.VM(context.Background(), 42)
	if err != nil {
		t.Fatal(err)
	}
	// The same document parsed offline gives the same answer.
	doc, _ := sim.VMXML(42)
	offline, err := opennebula.ParseVM([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, offline) {
		t.Errorf("VM() = %+v\nParseVM = %+v", got, offline)
	}
	if got.ID != 42 || got.Host != "node2" || got.HostID != 2 || got.Seq != 1 || got.SystemDSID != 101 || got.TMMadSystem != "ceph" {
		t.Errorf("VM() = %+v", got)
	}
	var images []string
	for _, d := range got.Disks {
		images = append(images, d.Image())
	}
	if want := "one/one-7-42-0 one/one-12 one-sys/one-sys-42-2"; strings.Join(images, " ") != want {
		t.Errorf("images = %v, want %s", images, want)
	}
	if m := got.Disks[0].Monitors; len(m) != 2 || m[1] != "10.0.0.2:6790" {
		t.Errorf("monitors = %v", m)
	}
}

// Every fixture survives a round trip through the stand-in (which
// re-renders it as oned would) unchanged.
func TestFixturesThroughSim(t *testing.T) {
	sim := startSim(t)
	c := newClient(t, sim, 5*time.Second)
	for _, f := range []string{"vm-42-running.xml", "vm-43-ssh.xml", "vm-44-pending.xml", "vm-45-pretty.xml"} {
		t.Run(f, func(t *testing.T) {
			doc, err := os.ReadFile(filepath.Join("testdata", f))
			if err != nil {
				t.Fatal(err)
			}
			want, err := opennebula.ParseVM(doc)
			if err != nil {
				t.Fatal(err)
			}
			if err := sim.AddVM(doc); err != nil {
				t.Fatal(err)
			}
			got, err := c.VM(context.Background(), want.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("through the sim:\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestCallErrors(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(*onedsim.Sim)
		auth     string
		timeout  time.Duration
		ctxLimit time.Duration
		vm       int
		kind     error
		code     int
		maxTime  time.Duration
	}{
		{name: "no such VM", vm: 99, kind: opennebula.ErrNotFound, code: opennebula.CodeNoExists},
		{name: "bad password", auth: simUser + ":wrong-PW-XYZ", vm: 42, kind: opennebula.ErrAuthentication, code: opennebula.CodeAuthentication},
		{name: "injected INTERNAL", setup: func(s *onedsim.Sim) { s.SetFailCalls("one.vm.info", 1) }, vm: 42, code: opennebula.CodeInternal},
		{name: "injected NO_EXISTS", setup: func(s *onedsim.Sim) { s.SetFailCallsWith("one.vm.info", 1, onedsim.CodeNoExists, "gone") }, vm: 42, kind: opennebula.ErrNotFound, code: opennebula.CodeNoExists},
		{name: "down", setup: func(s *onedsim.Sim) { _ = s.SetDown(true) }, vm: 42, kind: opennebula.ErrUnreachable, maxTime: time.Second},
		{name: "slow beyond the client timeout", setup: func(s *onedsim.Sim) { s.SetDelay(5 * time.Second) }, timeout: time.Second, vm: 42, kind: opennebula.ErrUnreachable, maxTime: 2 * time.Second},
		{name: "slow beyond the context deadline", setup: func(s *onedsim.Sim) { s.SetDelay(5 * time.Second) }, timeout: 30 * time.Second, ctxLimit: 300 * time.Millisecond, vm: 42, kind: opennebula.ErrUnreachable, maxTime: 1500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim := startSim(t, vm42())
			if tc.setup != nil {
				tc.setup(sim)
			}
			auth := tc.auth
			if auth == "" {
				auth = simAuth
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			c, err := opennebula.New(sim.URL(), authFile(t, auth), timeout)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.ctxLimit > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxLimit)
				defer cancel()
			}
			start := time.Now()
			_, err = c.VM(ctx, tc.vm)
			took := time.Since(start)
			if err == nil {
				t.Fatal("VM() succeeded")
			}
			var oe *opennebula.Error
			if !errors.As(err, &oe) || oe.Method != "one.vm.info" || oe.Code != tc.code {
				t.Errorf("err = %#v, want *opennebula.Error for one.vm.info with code %#x", err, tc.code)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Errorf("err = %v, want kind %v", err, tc.kind)
			}
			if errors.Is(tc.kind, opennebula.ErrUnreachable) != errors.Is(err, events.ErrUnavailable) {
				t.Errorf("errors.Is(err, events.ErrUnavailable) = %v for %v", errors.Is(err, events.ErrUnavailable), err)
			}
			if tc.maxTime > 0 && took > tc.maxTime {
				t.Errorf("took %v, want at most %v", took, tc.maxTime)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || strings.Contains(msg, simPass) || strings.Contains(msg, "XYZ") {
				t.Errorf("bad error message %q", msg)
			}
		})
	}
}
