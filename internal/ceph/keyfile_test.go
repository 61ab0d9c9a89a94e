package ceph_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// bareKey returns the base64 key of the first "key = ..." line of a keyring:
// what `ceph auth get-key client.<user>` prints and what OpenNebula's
// CEPH_KEY file holds (it is passed to `rbd --keyfile`, e.g.
// src/tm_mad/ceph/clone:109 of release-7.4.0).
func bareKey(t *testing.T, keyring string) string {
	t.Helper()
	f, err := os.Open(keyring)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && strings.TrimSpace(k) == "key" {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no key in %s", keyring)
	return ""
}

// TestConnectKeyFile: the Keyring path may name a bare key file as
// OpenNebula's CEPH_KEY does (read with librados' keyfile option) or a
// keyring; both connect to the real cluster, anything else is refused with
// a line that names the file and leaks no key.
func TestConnectKeyFile(t *testing.T) {
	c := testenv.StartCeph(t)
	dir := t.TempDir()
	key := bareKey(t, c.Keyring)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, path, want string
	}{
		{"keyring", c.Keyring, ""},
		{"key file with newline", write("libvirt.key", key+"\n"), ""},
		{"key file without newline", write("libvirt.key2", key), ""},
		{"empty file", write("empty", ""), "is neither a key file"},
		{"garbage", write("garbage", "this is not a key\n"), "is neither a key file"},
		{"wrong key", write("wrong.key", "AQBOl2ZjAAAAABAAnHtNQp1y4Lx6nC3ZKd1bMQ==\n"), "timed out; check mon_host"}, // cephx: the monitors never answer a wrong key
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := ceph.Connect(context.Background(), ceph.Config{MonHost: c.Mon, User: c.User, Keyring: tc.path,
				ConnectTimeout: 5 * time.Second, OpTimeout: 5 * time.Second})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("connect with %s: %v", tc.path, err)
				}
				defer cl.Close()
				// A real round trip to the monitors with the key.
				if err := cl.WaitForLatestOSDMap(context.Background()); err != nil {
					t.Fatalf("after connecting with %s: %v", tc.path, err)
				}
				return
			}
			if err == nil {
				cl.Close()
				t.Fatalf("connect with %s succeeded, want an error containing %q", tc.path, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
			if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "AQBOl2") {
				t.Fatalf("error leaks key material: %v", err)
			}
		})
	}
}
