package onedsim

import (
	"strings"
	"testing"

	dyn "github.com/OpenNebula/one/src/oca/go/src/goca/dynamic"
)

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string // Template.String() of the result
		wantErr string
	}{
		{name: "quoted and unquoted", in: `A = "x y"` + "\n" + `b=z`, want: "A=\"x y\"\nB=\"z\"\n"},
		{name: "names sorted, same names in order", in: "Z=1\nA=2\nZ=3\n", want: "A=\"2\"\nZ=\"1\"\nZ=\"3\"\n"},
		{name: "escaped quote", in: `A = "say \"hi\""`, want: "A=\"say \\\"hi\\\"\"\n"},
		{name: "backslash kept", in: `A = "c:\dir"`, want: "A=\"c:\\dir\"\n"},
		{name: "empty value at end of line", in: "A =\nB = 1", want: "A=\"\"\nB=\"1\"\n"},
		{name: "empty quoted", in: `A = ""`, want: "A=\"\"\n"},
		{name: "comments and blank lines", in: "# c\n\n  # c2\nA = 1 \n", want: "A=\"1\"\n"},
		{name: "vector", in: "V = [ b = \"2\", A = 1 ]", want: "V=[\n  A=\"1\",\n  B=\"2\" ]\n"},
		{name: "vector over lines", in: "V = [\n  A = \"1\" ,\n  B = \"x\"\n]\n", want: "V=[\n  A=\"1\",\n  B=\"x\" ]\n"},
		{name: "vector first duplicate key wins", in: `V = [ A = 1, A = 2 ]`, want: "V=[\n  A=\"1\" ]\n"},
		{name: "empty vector", in: `V = [ ]`, want: "V=[ ]\n"},
		{name: "repeated vectors", in: "E=[ID=1]\nE=[ID=2]", want: "E=[\n  ID=\"1\" ]\nE=[\n  ID=\"2\" ]\n"},
		{name: "lower-case name", in: "rbdfence_x = 1", want: "RBDFENCE_X=\"1\"\n"},
		{name: "digit-first name", in: "1A = 1", want: "ONE_1A=\"1\"\n"},
		{name: "XML-first name", in: "XMLRPC = 1", want: "ONE_XMLRPC=\"1\"\n"},
		{name: "xml template", in: "<TEMPLATE><A>1</A><V><K><![CDATA[v]]></K></V><E></E></TEMPLATE>", want: "A=\"1\"\nV=[\n  K=\"v\" ]\n"},
		{name: "two words unquoted", in: "A = b c", wantErr: "expecting EQUAL"},
		{name: "missing value", in: "A = [ B = ]", wantErr: "expecting STRING"},
		{name: "unterminated vector", in: "A = [ B = 1", wantErr: "COMMA or CBRACKET"},
		{name: "no name", in: "= 1", wantErr: "expecting VARIABLE"},
		{name: "unterminated quote is an unquoted value (flex STRING)", in: `A = "x`, want: "A=\"\\\"x\"\n"},
		{name: "cdata end", in: `A = "]]>"`, wantErr: "CDATA"},
		{name: "bad xml", in: "<TEMPLATE><A>", wantErr: "XML Template malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTemplate(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseTemplate error = %v, want %q", err, tc.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "Parse error") {
					t.Errorf("error %q does not start like oned's", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTemplate: %v", err)
			}
			if s := got.String(); s != tc.want {
				t.Errorf("got\n%s\nwant\n%s", s, tc.want)
			}
			// String() output parses back to the same template.
			again, err := ParseTemplate(got.String())
			if err != nil || again.String() != got.String() {
				t.Errorf("round trip: %v\n%s", err, again.String())
			}
		})
	}
}

// What goca's dynamic.Template.String() produces must parse as oned would.
func TestParseTemplateFromGoca(t *testing.T) {
	tpl := dyn.NewTemplate()
	tpl.AddPair("RBDFENCE_COLLISIONS", "3")
	tpl.AddPair("NOTE", `say "hi"`)
	v := tpl.AddVector("RBDFENCE_EVENT")
	v.AddPair("ID", "a1")
	v.AddPair("COOKIE", "auto 1")
	v2 := tpl.AddVector("RBDFENCE_EVENT")
	v2.AddPair("ID", "a2")
	got, err := ParseTemplate(tpl.String())
	if err != nil {
		t.Fatalf("ParseTemplate(%q): %v", tpl.String(), err)
	}
	evs := got.Get("RBDFENCE_EVENT")
	if len(evs) != 2 || evs[0].Vector["ID"] != "a1" || evs[0].Vector["COOKIE"] != "auto 1" || evs[1].Vector["ID"] != "a2" {
		t.Errorf("vectors = %+v", evs)
	}
	if n, _ := got.Single("NOTE"); n != `say "hi"` {
		t.Errorf("NOTE = %q", n)
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name, base, update, want string
	}{
		{"new attribute added", "A=1", "B=2", "A=\"1\"\nB=\"2\"\n"},
		{"same name replaced", "A=1\nB=2", "A=3", "A=\"3\"\nB=\"2\"\n"},
		{"repeated vectors replaced as a set", "E=[ID=1]\nE=[ID=2]\nE=[ID=3]\nX=keep", "E=[ID=3]\nE=[ID=4]",
			"E=[\n  ID=\"3\" ]\nE=[\n  ID=\"4\" ]\nX=\"keep\"\n"},
		{"vector replaces single of the same name", "E=1", "E=[ID=9]", "E=[\n  ID=\"9\" ]\n"},
		{"empty update keeps all", "A=1", "", "A=\"1\"\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base, err := ParseTemplate(tc.base)
			if err != nil {
				t.Fatal(err)
			}
			upd, err := ParseTemplate(tc.update)
			if err != nil {
				t.Fatal(err)
			}
			base.Merge(upd)
			if s := base.String(); s != tc.want {
				t.Errorf("got\n%s\nwant\n%s", s, tc.want)
			}
		})
	}
}

func TestTemplateXML(t *testing.T) {
	tpl, err := ParseTemplate("B=[Y=\"a]]>b\",X=1]\nA=\"<&>\"")
	if err == nil {
		t.Fatal("']]>' in a value must be refused like oned's parser does")
	}
	tpl, err = ParseTemplate("B=[Y=\"a&b\",X=1]\nA=\"<x>\"")
	if err != nil {
		t.Fatal(err)
	}
	want := "<USER_TEMPLATE><A><![CDATA[<x>]]></A><B><X><![CDATA[1]]></X><Y><![CDATA[a&b]]></Y></B></USER_TEMPLATE>"
	if got := tpl.XML("USER_TEMPLATE"); got != want {
		t.Errorf("XML =\n%s\nwant\n%s", got, want)
	}
}
