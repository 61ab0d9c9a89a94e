package audit

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite docs/CONFIGURATION.md's audit table from Record")

// TestFieldsThatDoNotApplyAreAbsent: a record's line holds only the fields
// that apply to it (issue 30 item 4: no "vm":-1, no "address":"").
func TestFieldsThatDoNotApplyAreAbsent(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		rec    Record
		absent []string
		has    map[string]any
	}{
		{"cli fence of an image", Record{Time: at, Run: "r", Op: "fence", Host: "h", Image: "one/a", Client: "client.9", Address: "10.0.0.1:0/5", Action: "blocklisted", Result: "ok"},
			[]string{"vm", "cookie", "error", "expire"}, map[string]any{"image": "one/a"}},
		{"vm 0 is a vm", Record{Time: at, Run: "r", Op: "start", VM: VMOf(0), Action: "blocklisted", Result: "ok"},
			[]string{"host", "image", "client", "address"}, map[string]any{"vm": 0.0}},
		{"claim reset", Record{Time: at, Run: "r", Op: "claim-reset", VM: VMOf(42), Action: "claim-reset", Result: "ok"},
			[]string{"address", "client", "image", "expire"}, map[string]any{"vm": 42.0, "action": "claim-reset"}},
		{"a domain that is no VM", Record{Time: at, Run: "r", Op: "start", VM: VMOf(-1), Action: "failed", Result: "error", Error: "x"},
			[]string{"vm"}, map[string]any{"error": "x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.rec)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range c.absent {
				if v, ok := m[k]; ok {
					t.Errorf("%q: %v present in %s", k, v, b)
				}
			}
			for k, v := range c.has {
				if m[k] != v {
					t.Errorf("%q = %v, want %v in %s", k, m[k], v, b)
				}
			}
		})
	}
}

// TestReadOlderLines: a line written before Record.VM became optional says
// "vm":-1 for no VM; Read gives it no VM, and keeps VM 0.
func TestReadOlderLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	lines := `{"time":"2026-11-01T10:00:00Z","run":"a","op":"fence","vm":-1,"host":"h","address":"10.0.0.1:0/1","action":"blocklisted","result":"ok"}
{"time":"2026-11-01T10:00:00Z","run":"b","op":"start","vm":0,"address":"10.0.0.2:0/2","action":"blocklisted","result":"ok"}
`
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, bad, err := Read(path)
	if err != nil || bad != 0 || len(recs) != 2 {
		t.Fatalf("%+v %d %v", recs, bad, err)
	}
	if recs[0].VM != nil || recs[1].VM == nil || *recs[1].VM != 0 {
		t.Fatalf("vm of the older lines: %v %v", recs[0].VM, recs[1].VM)
	}
	// An older host's answer carries its records the same way.
	var resp struct{ Audit []Record }
	if err := json.Unmarshal([]byte(`{"audit":[{"vm":-1,"op":"fence"},{"vm":7,"op":"start"}]}`), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Audit) != 2 || resp.Audit[0].VM != nil || *resp.Audit[1].VM != 7 || resp.Audit[0].Op != "fence" {
		t.Fatalf("%+v", resp.Audit)
	}
}

// TestSchemaDocumented: docs/CONFIGURATION.md's audit table is Record's
// fields, in order, with their JSON names and comments. `go test
// ./internal/audit -run Schema -update` rewrites it.
func TestSchemaDocumented(t *testing.T) {
	want := schemaTable(t)
	doc := filepath.Join("..", "..", "docs", "CONFIGURATION.md")
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- audit schema: from internal/audit Record -->\n", "<!-- end of audit schema -->\n"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", doc, strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	got := s[i+len(begin) : j]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(doc, []byte(s[:i+len(begin)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s's audit table is not Record's (go test ./internal/audit -run Schema -update); want:\n%s", doc, want)
}

// schemaTable renders Record from audit.go's source: each field's JSON name,
// type, whether it is always there, and its comment.
func schemaTable(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "audit.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var st *ast.StructType
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Record" {
			st, _ = ts.Type.(*ast.StructType)
		}
		return st == nil
	})
	if st == nil {
		t.Fatal("no struct Record in audit.go")
	}
	rt := reflect.TypeOf(Record{})
	var sb strings.Builder
	sb.WriteString("| field | type | present | meaning |\n|---|---|---|---|\n")
	for i, fl := range st.Fields.List {
		if len(fl.Names) != 1 || fl.Doc == nil {
			t.Fatalf("Record's field %d: one name and a doc comment each", i)
		}
		sf, ok := rt.FieldByName(fl.Names[0].Name)
		if !ok {
			t.Fatalf("field %s", fl.Names[0].Name)
		}
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		present := "always"
		if strings.Contains(opts, "omit") {
			present = "when it applies"
		}
		typ := map[string]string{"Time": "RFC 3339 time", "*int": "integer", "int": "integer", "string": "string"}[strings.TrimPrefix(sf.Type.String(), "time.")]
		if typ == "" {
			typ = sf.Type.String()
		}
		fmt.Fprintf(&sb, "| `%s` | %s | %s | %s |\n", name, typ, present, strings.Join(strings.Fields(fl.Doc.Text()), " "))
	}
	return sb.String()
}
