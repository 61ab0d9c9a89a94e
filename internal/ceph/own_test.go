package ceph

import (
	"context"
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
