package ceph

import (
	"slices"
	"testing"
)

func TestMonNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"10.0.0.1,10.0.0.2:6789", nil},
		{"v1:127.0.0.1:16789", nil},
		{"[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0] [v2:10.0.0.2:3300/0,v1:10.0.0.2:6789/0]", nil},
		{"[::1]:6789,v2:[fd00::1]:3300,fd00::2", nil},
		{"mon1.example.com:6789, mon2;10.0.0.3", []string{"mon1.example.com", "mon2"}},
		{"[v2:mon1:3300/0,v1:mon1:6789/0]", []string{"mon1", "mon1"}},
		{"", nil},
	} {
		if got := monNames(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("monNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
