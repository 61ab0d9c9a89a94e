package ceph

import (
	"strings"
	"testing"
)

// Ceph's replies are outside input: none of their parsers may panic, and an
// error is one line.
func FuzzParseBlocklist(f *testing.F) {
	f.Add([]byte(`[{"addr":"127.0.0.1:0/4086482705","until":"2026-11-30T11:25:31.456826+0000"}][]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"addr":"v1:[::1]:0/7","until":"2026-11-30T11:20:59.805760+0000"}][{"range":"10.0.0.0/24"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := parseBlocklist(b); err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
	})
}

func FuzzParseWatchers(f *testing.F) {
	f.Add("127.0.0.1:0/123\t4101\t94\n")
	f.Add("v1:10.0.0.2:0/7\t4102\t95\n[::1]:0/9\t1\t2\n")
	f.Fuzz(func(t *testing.T, s string) {
		ws, err := parseWatchers(s)
		if err == nil {
			for _, w := range ws {
				if !w.Addr.IP.IsValid() {
					t.Fatalf("accepted a watcher without an address: %q", s)
				}
			}
		}
	})
}

func FuzzDecodeID(f *testing.F) {
	f.Add([]byte{12, 0, 0, 0, '1', '0', '2', 'a', 'b', 'c', 'd', 'e', 'f', '0', '1', '2'})
	f.Add([]byte{255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := decodeID(b)
		if err == nil && (id == "" || len(id) > len(b)) {
			t.Fatalf("bad id %q from %v", id, b)
		}
	})
}

// FuzzDecodeLockInfo: any reply bytes give holders or an error, never a panic.
func FuzzDecodeLockInfo(f *testing.F) {
	f.Add([]byte{1, 1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(lockInfoReply(append([]byte{0, 0, 0, 0, 42, 0, 0, 0}, make([]byte, 128)...)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ls, err := decodeLockInfo(b)
		if err != nil && ls != nil {
			t.Fatalf("holders and an error: %v %v", ls, err)
		}
	})
}
