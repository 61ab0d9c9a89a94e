// Package security_test enforces docs/SECURITY.md: no shell built from
// input, safe file modes, no secret in any log line, event or error.
package security_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestNoShellFromInput: production Go code never runs a shell with a command
// string ("sh -c ...", "bash -c ..."): every external program gets its argv.
func TestNoShellFromInput(t *testing.T) {
	root := testenv.Root()
	checked := 0
	for _, dir := range []string{"cmd", "drivers", "hooks", "internal"} {
		filepath.Walk(filepath.Join(root, dir), func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return nil
			}
			checked++
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) < 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Command" && sel.Sel.Name != "CommandContext") {
					return true
				}
				for i, a := range call.Args {
					lit, ok := a.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					base := filepath.Base(v)
					if (base == "sh" || base == "bash" || base == "dash") && i+1 < len(call.Args) {
						t.Errorf("%s: runs a shell (%s): pass argv instead", fset.Position(call.Pos()), v)
					}
				}
				return true
			})
			return nil
		})
	}
	if checked < 20 {
		t.Fatalf("only %d files checked: wrong root?", checked)
	}
}
