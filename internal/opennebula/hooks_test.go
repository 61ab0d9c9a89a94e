package opennebula

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseHookPool(t *testing.T) {
	// As oned writes a hook (Hook::_to_xml): the template's values in CDATA,
	// a VM state hook's condition in STATE and LCM_STATE (ON dropped).
	hook := func(id, name, typ, cmd, on string) string {
		custom := ""
		if on == "CUSTOM" {
			custom = "<LCM_STATE><![CDATA[MIGRATE]]></LCM_STATE><STATE><![CDATA[ACTIVE]]></STATE>"
		}
		return "<HOOK><ID>" + id + "</ID><NAME>" + name + "</NAME><TYPE>" + typ + "</TYPE><LOCK/><TEMPLATE>" +
			"<ARGUMENTS><![CDATA[$TEMPLATE]]></ARGUMENTS><COMMAND><![CDATA[" + cmd + "]]></COMMAND>" + custom + "<ON><![CDATA[" + on + "]]></ON>" +
			"<RESOURCE><![CDATA[VM]]></RESOURCE></TEMPLATE></HOOK>"
	}
	for _, tc := range []struct {
		name    string
		doc     string
		want    string // "id:name:type:command:on[:state:lcm_state] ..." or the error's text
		wantErr bool
	}{
		{"empty pool", "<HOOK_POOL></HOOK_POOL>", "", false},
		{"two hooks", "<HOOK_POOL>" + hook("0", "prolog_ssh_rbdfence", "state", "rbdfence/sshwarm-rbdfence", "PROLOG") +
			hook("4", "ha", "state", "ft/host_error.rb", "") + "</HOOK_POOL>",
			"0:prolog_ssh_rbdfence:state:rbdfence/sshwarm-rbdfence:PROLOG 4:ha:state:ft/host_error.rb:", false},
		{"a custom state", "<HOOK_POOL>" + hook("1", "migrate_ssh_rbdfence", "state", "rbdfence/sshwarm-rbdfence", "CUSTOM") + "</HOOK_POOL>",
			"1:migrate_ssh_rbdfence:state:rbdfence/sshwarm-rbdfence:CUSTOM:ACTIVE:MIGRATE", false},
		{"an api hook without ON", "<HOOK_POOL><HOOK><ID>2</ID><NAME>a</NAME><TYPE>api</TYPE><TEMPLATE><COMMAND>x</COMMAND></TEMPLATE></HOOK></HOOK_POOL>", "2:a:api:x:", false},
		{"no template", "<HOOK_POOL><HOOK><ID>1</ID><NAME>n</NAME></HOOK></HOOK_POOL>", "1:n:::", false},
		{"no ID", "<HOOK_POOL><HOOK><NAME>n</NAME></HOOK></HOOK_POOL>", "without ID", true},
		{"bad ID", "<HOOK_POOL><HOOK><ID>x</ID></HOOK></HOOK_POOL>", `"x": not a number`, true},
		{"not a pool", "<HOST_POOL/>", "HOOK_POOL", true},
		{"not XML", "<", "XML", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := parseHookPool([]byte(tc.doc))
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "one.hookpool.info") {
					t.Fatalf("err %v, want one.hookpool.info's error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hs {
				g := fmt.Sprintf("%d:%s:%s:%s:%s", h.ID, h.Name, h.Type, h.Command, h.On)
				if h.State != "" || h.LCMState != "" {
					g += ":" + h.State + ":" + h.LCMState
				}
				got = append(got, g)
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("got %q, want %q", g, tc.want)
			}
		})
	}
}
