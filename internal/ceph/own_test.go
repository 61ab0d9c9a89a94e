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

func TestParseIndexedWatchers(t *testing.T) {
	ws, err := parseIndexedWatchers("1\t127.0.0.1:0/123\t4101\t94\n0\tv1:10.0.0.2:0/7\t4102\t95\n", 2)
	if err != nil || len(ws[0]) != 1 || ws[0][0].Addr.String() != "10.0.0.2:0/7" || ws[0][0].ID != 4102 || len(ws[1]) != 1 || ws[1][0].Cookie != 94 {
		t.Fatalf("%+v %v", ws, err)
	}
	if ws, err := parseIndexedWatchers("", 3); err != nil || len(ws) != 3 || len(ws[2]) != 0 {
		t.Fatalf("empty: %+v %v", ws, err)
	}
	for _, bad := range []string{"0\t127.0.0.1:0/1\tx\t2", "5\t127.0.0.1:0/1\t1\t2", "-1\t127.0.0.1:0/1\t1\t2", "127.0.0.1:0/1\t1\t2"} {
		if _, err := parseIndexedWatchers(bad, 2); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// lockInfoReply encodes a cls_lock_get_info_reply with one locker.
func lockInfoReply(addr []byte) []byte {
	le32 := func(v int) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	str := func(s string) []byte { return append(le32(len(s)), s...) }
	start := func(body []byte) []byte { return append(append([]byte{1, 1}, le32(len(body))...), body...) }
	id := start(append(append([]byte{8}, 0x05, 0x10, 0, 0, 0, 0, 0, 0), str("auto 94")...)) // client.4101
	info := start(append(append(make([]byte, 8), addr...), str("desc")...))
	body := append(le32(1), id...)
	body = append(body, info...)
	body = append(body, 1) // exclusive
	body = append(body, str("internal")...)
	return start(body)
}

func TestDecodeLockInfo(t *testing.T) {
	le32 := func(v int) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	// msgr2-era entity_addr_t: marker 1, ENCODE_START, type, nonce, sockaddr (family le16).
	v4 := append([]byte{2, 0, 0, 0, 127, 0, 0, 1}, make([]byte, 8)...)
	addr2 := []byte{1}
	addr2 = append(addr2, 1, 1)
	addr2 = append(addr2, le32(12+len(v4))...)
	addr2 = append(addr2, le32(1)...)   // type legacy
	addr2 = append(addr2, le32(123)...) // nonce
	addr2 = append(addr2, le32(len(v4))...)
	addr2 = append(addr2, v4...)
	v6 := make([]byte, 28)
	v6[0], v6[2], v6[3], v6[23] = 10, 0x1a, 0x85, 1 // AF_INET6, port 6789, ::1
	addr6 := append([]byte{1, 1, 1}, le32(12+len(v6))...)
	addr6 = append(append(append(append(addr6, le32(2)...), le32(7)...), le32(len(v6))...), v6...)
	// legacy: zero word, nonce, sockaddr_storage with a big-endian family.
	ss := make([]byte, 128)
	ss[1], ss[2], ss[3], ss[4], ss[5], ss[6], ss[7] = 2, 0x1a, 0x85, 10, 0, 0, 2
	legacy := append(append(le32(0), le32(42)...), ss...)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
		bad  bool
	}{
		{name: "msgr2", in: lockInfoReply(addr2), want: "client.4101|auto 94|127.0.0.1:0/123"},
		{name: "ipv6", in: lockInfoReply(addr6), want: "client.4101|auto 94|[::1]:6789/7"},
		{name: "legacy", in: lockInfoReply(legacy), want: "client.4101|auto 94|10.0.0.2:6789/42"},
		{name: "no lockers", in: []byte{1, 1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, want: ""},
		{name: "truncated", in: lockInfoReply(addr2)[:40], bad: true},
		{name: "bad marker", in: lockInfoReply(append([]byte{7}, addr2[1:]...)), bad: true},
		{name: "huge count", in: []byte{1, 1, 4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, bad: true},
		{name: "empty", in: nil, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, err := decodeLockInfo(tc.in)
			var got []string
			for _, l := range ls {
				got = append(got, l.client+"|"+l.cookie+"|"+l.addr)
			}
			if (err != nil) != tc.bad || strings.Join(got, ",") != tc.want {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}
