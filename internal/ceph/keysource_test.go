package ceph

import (
	"strings"
	"testing"
)

func TestClassifyKey(t *testing.T) {
	const key = "AQBOl2ZjAAAAABAAnHtNQp1y4Lx6nC3ZKd1bMQ=="
	for _, tc := range []struct {
		name, content, want string
	}{
		{"bare key", key, "keyfile"},
		{"bare key, newline", key + "\n", "keyfile"},
		{"bare key, blanks", "  " + key + " \r\n", "keyfile"},
		{"keyring", "[client.libvirt]\n\tkey = " + key + "\n", "keyring"},
		{"keyring with caps", "[client.libvirt]\nkey=" + key + "\ncaps mon = \"profile rbd\"\n", "keyring"},
		{"two keys", key + " " + key, ""},
		{"not base64", "not-a-key!", ""},
		{"empty", "", ""},
		{"section only", "[client.libvirt]\n", ""},
		{"key line only", "key = " + key + "\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := classifyKey("/etc/ceph/k", []byte(tc.content))
			if got != tc.want {
				t.Fatalf("classifyKey = %q, %v; want %q", got, err, tc.want)
			}
			if tc.want == "" && (err == nil || strings.Contains(err.Error(), "AQB")) {
				t.Fatalf("want an error that names the file and not the key, got %v", err)
			}
		})
	}
}
