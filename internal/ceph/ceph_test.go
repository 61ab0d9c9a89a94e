package ceph_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/engine/enginetest"
	"github.com/rbdfence/rbdfence/test/testenv"
)

func connect(t *testing.T, c *testenv.Ceph) *ceph.Cluster {
	t.Helper()
	cl, err := ceph.Connect(context.Background(), ceph.Config{MonHost: c.Mon, User: c.User, Keyring: c.Keyring,
		ConnectTimeout: 10 * time.Second, OpTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func image(t *testing.T, spec string) engine.Image {
	pool, name, _ := strings.Cut(spec, "/")
	return engine.Image{Pool: pool, Name: name}
}

// TestConformance runs the same suite as the fake, on the real cluster, as
// client.libvirt with the documented caps; zombies are separate processes.
func TestConformance(t *testing.T) {
	c := testenv.StartCeph(t)
	cl := connect(t, c)
	enginetest.Run(t, enginetest.Harness{
		Cluster: cl,
		Pool:    c.Pool,
		NewImage: func(t *testing.T) engine.Image {
			return image(t, c.NewImage(t, "conf"))
		},
		Zombie: func(t *testing.T, img engine.Image, lock bool) engine.Addr {
			mode := "idle"
			if lock {
				mode = "write"
			}
			z := testenv.StartZombie(t, c, img.String(), mode)
			if lock {
				z.WaitWrite(t, true, 10*time.Second)
			}
			a, err := engine.ParseAddr(z.Addr)
			if err != nil {
				t.Fatalf("zombie address %q: %v", z.Addr, err)
			}
			return a
		},
	})
}

func TestParseAddrList(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:0/123", "127.0.0.1:0/123"},
		{"[v2:10.0.0.1:0/5,v1:10.0.0.1:0/5]", "10.0.0.1:0/5,10.0.0.1:0/5"},
		{"v1:10.0.0.1:0/5", "10.0.0.1:0/5"},
		{"garbage", ""},
	} {
		var got []string
		for _, a := range ceph.ParseAddrList(tc.in) {
			got = append(got, a.String())
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%q: got %v want %s", tc.in, got, tc.want)
		}
	}
}

func TestConnectErrors(t *testing.T) {
	c := testenv.StartCeph(t)
	for _, tc := range []struct {
		name string
		cfg  ceph.Config
		want string
		max  time.Duration
	}{
		{"wrong monitor", ceph.Config{MonHost: "127.0.0.1:1", User: c.User, Keyring: c.Keyring, ConnectTimeout: 3 * time.Second}, "timed out", 8 * time.Second},
		{"missing keyring", ceph.Config{MonHost: c.Mon, User: c.User, Keyring: "/nonexistent/keyring", ConnectTimeout: 3 * time.Second}, "keyring", 8 * time.Second},
		{"wrong user", ceph.Config{MonHost: c.Mon, User: "nobody", Keyring: c.Keyring, ConnectTimeout: 3 * time.Second}, "client.nobody", 8 * time.Second},
		// librados says "rados: ret=-22" (and prints "server name not found" on stdout).
		{"unresolvable monitor", ceph.Config{MonHost: "v1:nosuchmon.invalid:16789," + c.Mon, User: c.User, Keyring: c.Keyring, ConnectTimeout: 3 * time.Second}, "cannot resolve monitor host nosuchmon.invalid", 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := ceph.Connect(context.Background(), tc.cfg)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
			if took > tc.max {
				t.Fatalf("took %s, the bound is %s", took, tc.max)
			}
			if strings.Contains(err.Error(), "AQ") {
				t.Fatalf("error leaks key material: %v", err)
			}
		})
	}
}

// TestFormat1Refused: an image with a format 1 header ("<name>.rbd", no
// rbd_id.<name>) is refused by name, a name with neither is missing. The
// header is written with rados: Pacific no longer creates format 1 images.
func TestFormat1Refused(t *testing.T) {
	c := testenv.StartCeph(t)
	cl := connect(t, c)
	name := fmt.Sprintf("fmt1-%d", time.Now().UnixNano())
	// struct rbd_obj_header_ondisk (112 bytes): text, block_name, signature,
	// version, options (order 22), image_size 16 MiB, snap_seq, snap_count,
	// reserved, snap_names_len.
	hdr := make([]byte, 112)
	copy(hdr[0:], "<<< Rados Block Device Image >>>\n")
	copy(hdr[40:], "rb.0.1.2")
	copy(hdr[64:], "RBD")
	copy(hdr[68:], "001.005")
	hdr[76] = 22
	binary.LittleEndian.PutUint64(hdr[80:], 16<<20)
	file := filepath.Join(t.TempDir(), "header")
	if err := os.WriteFile(file, hdr, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Admin(t, "rados", "-p", c.Pool, "put", name+".rbd", file)
	t.Cleanup(func() { _ = exec.Command("rados", "-c", c.AdminConf, "-p", c.Pool, "rm", name+".rbd").Run() })

	_, err := cl.ImageClients(context.Background(), engine.Image{Pool: c.Pool, Name: name})
	if err == nil || !strings.Contains(err.Error(), "format 1 images are not supported") || errors.Is(err, engine.ErrImageNotFound) {
		t.Fatalf("format 1 image: want \"format 1 images are not supported\", got %v", err)
	}
	_, err = cl.ImageClients(context.Background(), engine.Image{Pool: c.Pool, Name: name + "-nope"})
	if !errors.Is(err, engine.ErrImageNotFound) {
		t.Fatalf("missing image: want ErrImageNotFound, got %v", err)
	}
}

// TestImagesClients: one call for many images gives each image's clients as
// librbd's own listing (rbd lock ls) and the zombie itself report them:
// clean images, a locking and watching zombie, a missing image and a
// missing pool, in one call; ImageClients agrees for each image.
func TestImagesClients(t *testing.T) {
	c := testenv.StartCeph(t)
	cl := connect(t, c)
	var imgs []engine.Image
	for i := 0; i < 5; i++ {
		imgs = append(imgs, image(t, c.NewImage(t, "batch")))
	}
	z := testenv.StartZombie(t, c, imgs[2].String(), "write")
	z.WaitWrite(t, true, 10*time.Second)
	var rbdLocks []struct{ ID, Locker, Address string }
	if err := json.Unmarshal([]byte(c.AsLibvirt(t, "rbd", "lock", "ls", "--format", "json", imgs[2].String())), &rbdLocks); err != nil || len(rbdLocks) != 1 {
		t.Fatalf("rbd lock ls: %+v %v", rbdLocks, err)
	}
	imgs = append(imgs, engine.Image{Pool: c.Pool, Name: fmt.Sprintf("missing-%d", time.Now().UnixNano())},
		engine.Image{Pool: "nopool", Name: "x"})
	for _, conc := range []int{16, 3, 1} { // all at once, a window smaller than the images, one by one
		got, errs := cl.ImagesClients(context.Background(), imgs, conc)
		if len(got) != len(imgs) || len(errs) != len(imgs) {
			t.Fatalf("concurrency %d: %d results, %d errors for %d images", conc, len(got), len(errs), len(imgs))
		}
		l := got[2].Lockers
		if len(l) != 1 || l[0].Client != rbdLocks[0].Locker || l[0].Cookie != rbdLocks[0].ID || l[0].Addr.String() != rbdLocks[0].Address || l[0].Addr.String() != z.Addr {
			t.Errorf("concurrency %d: locker of %s: got %+v, rbd lock ls says %+v, the zombie is %s", conc, imgs[2], l, rbdLocks[0], z.Addr)
		}
		if w := got[2].Watchers; len(w) != 1 || w[0].Addr.String() != z.Addr {
			t.Errorf("concurrency %d: watcher of %s: got %+v, the zombie is %s", conc, imgs[2], w, z.Addr)
		}
		if !errors.Is(errs[5], engine.ErrImageNotFound) || errs[6] == nil || errors.Is(errs[6], engine.ErrImageNotFound) {
			t.Errorf("concurrency %d: missing image %v, missing pool %v", conc, errs[5], errs[6])
		}
		for _, i := range []int{0, 1, 3, 4} {
			if errs[i] != nil || len(got[i].Lockers)+len(got[i].Watchers) != 0 {
				t.Errorf("concurrency %d: clean image %s: %+v %v", conc, imgs[i], got[i], errs[i])
			}
		}
		for i, img := range imgs {
			one, err := cl.ImageClients(context.Background(), img)
			if fmt.Sprint(err) != fmt.Sprint(errs[i]) || fmt.Sprint(one) != fmt.Sprint(got[i]) {
				t.Errorf("concurrency %d, %s: together %+v %v, alone %+v %v", conc, img, got[i], errs[i], one, err)
			}
		}
	}
}
