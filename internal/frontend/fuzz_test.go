package frontend

import (
	"encoding/base64"
	"strings"
	"testing"
)

// oned's stdin and argv are outside input: no panic, one-line errors.
func FuzzDecodeBase64(f *testing.F) {
	f.Add([]byte(base64.StdEncoding.EncodeToString([]byte("<VM><ID>42</ID></VM>"))))
	f.Add([]byte("PFZNPjwvVk0+\n"))
	f.Add([]byte("not base64!"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := DecodeBase64("stdin", b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		again, err := DecodeBase64("stdin", []byte(base64.StdEncoding.EncodeToString(out)))
		if err != nil || string(again) != string(out) {
			t.Fatalf("accepted input does not round-trip: %v", err)
		}
	})
}

func FuzzDriverArgs(f *testing.F) {
	f.Add("/var/lib/one/vms/42/deployment.0\x00node1\x0042\x00node1")
	f.Add("one-42\x00node2\x00node1\x0042\x00node1")
	f.Add("-t 15 -r 0 kvm --loc=save -pl x")
	f.Add("ckpt\x00node1\x00one-42\x0042\x00node1")
	f.Add("42\x00node1")
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		check := func(err error) {
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
		}
		_, err := ParseDeployArgs(args)
		check(err)
		_, err = ParseRestoreArgs(args)
		check(err)
		_, err = ParsePrestartArgs(args)
		check(err)
		_, err = ParseVMMMigrateArgs(args)
		check(err)
		_, err = ParseDriverArgs(s)
		check(err)
	})
}
