package vmdisk

import "testing"

func TestParseImageRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in                  string
		pool, ns, name, err string
	}{
		{in: "one/one-7", pool: "one", name: "one-7"},
		{in: "one/tenant/one-7", pool: "one", ns: "tenant", name: "one-7"},
		{in: "one", err: "want POOL/IMAGE"},
		{in: "one//x", err: "want POOL/IMAGE"},
		{in: "a/b/c/d", err: "want POOL/IMAGE"},
		{in: "", err: "want POOL/IMAGE"},
	} {
		pool, ns, name, err := ParseImage(tc.in)
		if tc.err != "" {
			if err == nil {
				t.Errorf("%q: want an error", tc.in)
			}
			continue
		}
		d := Disk{Pool: pool, Namespace: ns, Name: name}
		if err != nil || pool != tc.pool || ns != tc.ns || name != tc.name || d.Image() != tc.in {
			t.Errorf("%q: got %q %q %q (%v), image %q", tc.in, pool, ns, name, err, d.Image())
		}
	}
}
