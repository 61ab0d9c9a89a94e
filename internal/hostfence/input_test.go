package hostfence

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestReadHookInput(t *testing.T) {
	doc := "<HOST><ID>5</ID><NAME>node5</NAME><STATE>3</STATE><MONITORING/></HOST>"
	enc := base64.StdEncoding.EncodeToString([]byte(doc))
	tests := []struct {
		name, in, says string
	}{
		{"strict base64", enc, ""},
		{"wrapped", enc[:10] + "\n" + enc[10:] + "\n", ""},
		{"empty", " \n", "stdin is empty"},
		{"not base64", "<HOST>", "not base64"},
		{"not a host", base64.StdEncoding.EncodeToString([]byte("<VM><ID>1</ID></VM>")), "not a host document"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ReadHookInput(strings.NewReader(tc.in))
			if tc.says == "" {
				if err != nil || h.ID != 5 || h.Name != "node5" {
					t.Fatalf("%+v %v", h, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want %q", err, tc.says)
			}
		})
	}
}
