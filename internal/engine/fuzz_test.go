package engine

import "testing"

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1:0/3021474917", "v1:10.1.2.3:6800/42", "[::1]:0/7", "10.0.0.1:0/0", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddr(s)
		if err != nil {
			return
		}
		b, err := ParseAddr(a.String())
		if err != nil || b != a {
			t.Fatalf("%q -> %v does not round-trip: %v %v", s, a, b, err)
		}
	})
}
