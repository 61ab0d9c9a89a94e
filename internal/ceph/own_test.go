package ceph

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestOwnClientNeverListed opens the image read-write on our own connection
// (a real watch with our address) and checks that neither the watch nor our
// lock is reported, so the engine can never fence us.
func TestOwnClientNeverListed(t *testing.T) {
	c := testenv.StartCeph(t)
	spec := c.NewImage(t, "own")
	pool, name, _ := strings.Cut(spec, "/")
	cl, err := Connect(context.Background(), Config{MonHost: c.Mon, User: c.User, Keyring: c.Keyring, ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if len(cl.OwnAddrs()) == 0 {
		t.Fatal("no own address known")
	}
	io, err := cl.ioctx(pool, "")
	if err != nil {
		t.Fatal(err)
	}
	im, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if _, err := im.WriteAt([]byte("ours"), 0); err != nil { // takes the exclusive lock
		t.Fatal(err)
	}
	out := c.AsLibvirt(t, "rbd", "status", spec)
	if !strings.Contains(out, "watcher=") {
		t.Fatalf("our watch is not visible to rbd status:\n%s", out)
	}
	got, err := cl.ImageClients(context.Background(), engine.Image{Pool: pool, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Lockers)+len(got.Watchers) != 0 {
		t.Fatalf("our own client was listed: %+v (own %v)", got, cl.OwnAddrs())
	}
}

func TestDecodeID(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
		bad  bool
	}{
		{in: []byte{12, 0, 0, 0, '1', '0', '2', 'a', 'b', 'c', 'd', 'e', 'f', '0', '1', '2'}, want: "102abcdef012"},
		{in: []byte{1, 0, 0}, bad: true},
		{in: []byte{9, 0, 0, 0, 'x'}, bad: true},
		{in: []byte{0, 0, 0, 0}, bad: true},
	} {
		got, err := decodeID(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%v: got %q, %v", tc.in, got, err)
		}
	}
}

func TestParseWatchers(t *testing.T) {
	ws, err := parseWatchers("127.0.0.1:0/123\t4101\t94\nv1:10.0.0.2:0/7\t4102\t95\n")
	if err != nil || len(ws) != 2 || ws[1].Addr.String() != "10.0.0.2:0/7" || ws[1].ID != 4102 || ws[1].Cookie != 95 {
		t.Fatalf("%+v %v", ws, err)
	}
	for _, bad := range []string{"x\t1\t2", "127.0.0.1:0/1\tx\t2", "127.0.0.1:0/1\t1"} {
		if _, err := parseWatchers(bad); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
}

func TestParseBlocklist(t *testing.T) {
	out := []byte(`[{"addr":"127.0.0.1:0/4086482705","until":"2026-11-30T11:25:31.456826+0000"},{"addr":"v1:10.0.0.2:0/7","until":"2026-11-30T11:20:59.805760+0000"}][]`)
	l, err := parseBlocklist(out)
	if err != nil || len(l) != 2 || l[1].Addr != "10.0.0.2:0/7" || l[0].Until.Hour() != 11 {
		t.Fatalf("%+v %v", l, err)
	}
	if _, err := parseBlocklist([]byte(`{"oops"`)); err == nil {
		t.Fatal("garbage must be an error")
	}
	if l, err := parseBlocklist(nil); err != nil || len(l) != 0 {
		t.Fatalf("empty reply: %v %v", l, err)
	}
}

func TestAdminCaps(t *testing.T) {
	c := testenv.StartCeph(t)
	ctx := context.Background()
	lib, err := Connect(ctx, Config{MonHost: c.Mon, User: c.User, Keyring: c.Keyring})
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	if err := lib.CanBlocklist(ctx); err != nil {
		t.Fatalf("client.libvirt must be able to blocklist: %v", err)
	}
	a, _ := engine.ParseAddr("192.0.2.77:0/4242")
	if err := lib.Blocklist(ctx, a, time.Minute); err != nil {
		t.Fatal(err)
	}
	list, err := lib.BlocklistList(ctx)
	found := false
	for _, e := range list {
		found = found || e.Addr == a.String()
	}
	if err != nil || !found {
		t.Fatalf("blocklist ls as client.libvirt: %v (found %v)", err, found)
	}
	var ce *CapError
	if err := lib.Unblocklist(ctx, a); !errors.As(err, &ce) || !strings.Contains(err.Error(), "blocklistop=rm") {
		t.Fatalf("client.libvirt must not remove entries, with a message naming the cap: %v", err)
	}
	rm, err := Connect(ctx, Config{MonHost: c.Mon, User: c.RMUser, Keyring: c.RMUserKeyring})
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	if err := rm.Unblocklist(ctx, a); err != nil {
		t.Fatalf("the rm user must remove entries: %v", err)
	}
}

func TestParseHeadersClients(t *testing.T) {
	ls, ws, err := parseHeadersClients("L\t1\tclient.4101\tauto 94\t127.0.0.1:0/123\nW\t1\t127.0.0.1:0/123\t4101\t94\nW\t0\tv1:10.0.0.2:0/7\t4102\t95\n", 2)
	if err != nil || len(ls[0]) != 0 || len(ls[1]) != 1 || ls[1][0] != (rawLocker{"client.4101", "auto 94", "127.0.0.1:0/123"}) ||
		len(ws[0]) != 1 || ws[0][0].Addr.String() != "10.0.0.2:0/7" || ws[0][0].ID != 4102 || len(ws[1]) != 1 || ws[1][0].Cookie != 94 {
		t.Fatalf("%+v %+v %v", ls, ws, err)
	}
	if ls, ws, err := parseHeadersClients("", 3); err != nil || len(ls) != 3 || len(ws) != 3 || len(ls[2])+len(ws[2]) != 0 {
		t.Fatalf("empty: %+v %+v %v", ls, ws, err)
	}
	for _, bad := range []string{"L\t0\tclient.1\tcookie", "X\t0\tsomething", "W\t0\t127.0.0.1:0/1\tx\t2", "W\t5\t127.0.0.1:0/1\t1\t2",
		"W\t-1\t127.0.0.1:0/1\t1\t2", "127.0.0.1:0/1\t1\t2"} {
		if _, _, err := parseHeadersClients(bad, 2); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
