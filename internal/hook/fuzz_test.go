package hook

import (
	"strings"
	"testing"
)

// libvirtd's argv: no panic, one-line errors.
func FuzzParseArgs(f *testing.F) {
	f.Add("one-42\x00prepare\x00begin\x00-")
	f.Add("one-42\x00migrate\x00begin\x00-")
	f.Add("x\x00\x00\x00")
	f.Fuzz(func(t *testing.T, s string) {
		_, err := ParseArgs(strings.Split(s, "\x00"))
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
	})
}
