package checkjson

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const docPath = "../../docs/CLI.md"

// types are the documented types by the name docs/CLI.md gives them.
var types = map[string]reflect.Type{
	"checkjson.Check":  reflect.TypeFor[Check](),
	"checkjson.Image":  reflect.TypeFor[Image](),
	"checkjson.Client": reflect.TypeFor[Client](),
	"checkjson.VMs":    reflect.TypeFor[VMs](),
	"checkjson.VM":     reflect.TypeFor[VM](),
}

// section returns what follows each "<!-- kind: name -->" marker of the
// doc, up to the next blank line after its block or table.
func sections(t *testing.T, kind string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	re := regexp.MustCompile(`(?m)^<!-- ` + kind + `: (\S+) -->\n`)
	doc := string(b)
	for _, m := range re.FindAllStringSubmatchIndex(doc, -1) {
		name, rest := doc[m[2]:m[3]], doc[m[1]:]
		if strings.HasPrefix(rest, "```json\n") {
			end := strings.Index(rest[8:], "\n```")
			rest = rest[8 : 8+end+1]
		} else if i := strings.Index(rest, "\n\n"); i >= 0 {
			rest = rest[:i+1]
		}
		if _, dup := out[name]; dup {
			t.Fatalf("%s: two %s sections for %s", docPath, kind, name)
		}
		out[name] = rest
	}
	return out
}

// TestExamples: each example decodes into its type with no unknown field
// and prints back byte for byte (so it shows every field, as the CLI
// prints it), and between them the examples show every documented type.
func TestExamples(t *testing.T) {
	ex := sections(t, "example")
	if len(ex) != 2 {
		t.Fatalf("%s: want the examples of checkjson.Check and checkjson.VMs, got %d", docPath, len(ex))
	}
	seen := map[reflect.Type]bool{}
	for name, text := range ex {
		typ, ok := types[name]
		if !ok {
			t.Fatalf("%s: example of unknown type %s", docPath, name)
		}
		v := reflect.New(typ)
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v.Interface()); err != nil {
			t.Fatalf("%s example: %v", name, err)
		}
		var back bytes.Buffer
		if err := Write(&back, v.Interface()); err != nil {
			t.Fatal(err)
		}
		if back.String() != text {
			t.Errorf("%s example is not what the CLI prints for it; it prints:\n%s", name, back.String())
		}
		visit(v.Elem(), seen)
	}
	for name, typ := range types {
		if !seen[typ] {
			t.Errorf("no example shows a %s (give one a non-empty array of it)", name)
		}
	}
}

func visit(v reflect.Value, seen map[reflect.Type]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			visit(v.Elem(), seen)
		}
	case reflect.Slice:
		for i := range v.Len() {
			visit(v.Index(i), seen)
		}
	case reflect.Struct:
		seen[v.Type()] = true
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				visit(v.Field(i), seen)
			}
		}
	}
}

// TestFieldTables: each type's table lists exactly its JSON fields, in
// order, with the JSON type of each.
func TestFieldTables(t *testing.T) {
	tables := sections(t, "fields")
	for name, typ := range types {
		table, ok := tables[name]
		if !ok {
			t.Errorf("%s: no field table for %s", docPath, name)
			continue
		}
		var want, got []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if strings.Contains(f.Tag.Get("json"), "omit") {
				t.Errorf("%s.%s: an omitted field; every field is printed", name, f.Name)
			}
			want = append(want, "`"+tag+"` | "+jsonType(f.Type))
		}
		for _, row := range rows(table)[1:] {
			got = append(got, row[0]+" | "+row[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: the field table says\n  %s\nthe type has\n  %s", name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

// jsonType names a Go type as the field tables do.
func jsonType(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[*time.Time]():
		return "string or null"
	case t.Kind() == reflect.Pointer:
		return "object or null"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() == reflect.Int:
		return "number"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Slice:
		return "array of " + strings.ToLower(t.Elem().Name())
	case t.Kind() == reflect.Struct:
		return "object " + strings.ToLower(t.Name())
	}
	return t.String()
}

func rows(table string) [][]string {
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		out = append(out, cells)
	}
	return out
}

// TestValueTables: the decision and action tables list exactly the
// engine's values (its constants of those types).
func TestValueTables(t *testing.T) {
	consts := engineConsts(t)
	tables := sections(t, "values")
	for _, typ := range []string{"Decision", "Action"} {
		table, ok := tables["engine."+typ]
		if !ok {
			t.Fatalf("%s: no value table for engine.%s", docPath, typ)
		}
		var got []string
		for _, row := range rows(table)[1:] {
			got = append(got, strings.Trim(row[0], "`"))
		}
		sort.Strings(got)
		want := consts[typ]
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("engine.%s: the table has %v, the engine %v", typ, got, want)
		}
	}
}

// engineConsts reads the string constants of each type declared in
// internal/engine.
func engineConsts(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../engine", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				vs, ok := n.(*ast.ValueSpec)
				if !ok || vs.Type == nil || len(vs.Values) != len(vs.Names) {
					return true
				}
				id, ok := vs.Type.(*ast.Ident)
				if !ok {
					return true
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out[id.Name] = append(out[id.Name], s)
					}
				}
				return true
			})
		}
	}
	if len(out["Decision"]) < 5 || len(out["Action"]) < 4 {
		t.Fatalf("engine constants not found: %v", out)
	}
	return out
}
