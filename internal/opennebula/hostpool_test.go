package opennebula

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseHostPool(t *testing.T) {
	host := func(id, name, state, mad string) string {
		return "<HOST><ID>" + id + "</ID><NAME>" + name + "</NAME><STATE>" + state + "</STATE><VM_MAD><![CDATA[" + mad + "]]></VM_MAD><MONITORING/></HOST>"
	}
	for _, tc := range []struct {
		name    string
		doc     string
		want    string // "name:state:mad ..." or the error's text
		wantErr bool
	}{
		{"empty pool", "<HOST_POOL></HOST_POOL>", "", false},
		{"two hosts", "<HOST_POOL>" + host("0", "node1", "2", "kvm") + host("3", "node2", "8", "qemu") + "</HOST_POOL>", "node1:2:kvm node2:8:qemu", false},
		{"no VM_MAD", "<HOST_POOL><HOST><ID>1</ID><NAME>n</NAME><STATE>4</STATE></HOST></HOST_POOL>", "n:4:", false},
		{"no name", "<HOST_POOL><HOST><ID>1</ID><STATE>2</STATE></HOST></HOST_POOL>", "no NAME", true},
		{"bad state", "<HOST_POOL>" + host("1", "n", "x", "kvm") + "</HOST_POOL>", "STATE", true},
		{"not a pool", "<VM_POOL/>", "HOST_POOL", true},
		{"not XML", "{", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := parseHostPool([]byte(tc.doc))
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hs {
				got = append(got, h.Name+":"+strconv.Itoa(h.State)+":"+h.VMMad)
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Fatalf("got %q, want %q", s, tc.want)
			}
		})
	}
}
