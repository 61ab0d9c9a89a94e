package ceph_test

import (
	"context"
	"encoding/binary"
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
