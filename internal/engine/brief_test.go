package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestBriefsFit: every error type of the engine says in at most BriefMax
// characters (host names of 5, deploy numbers of 2 digits) what happened and
// what to run, and every one is in this table (a new error type without a
// Brief fails here).
func TestBriefsFit(t *testing.T) {
	c := Claim{Seq: 12, Host: "node2", Window: &Window{Src: "node1", Dst: "node2", Seq: 12}}
	all := []struct {
		err  Briefer
		want string // what it must name: the thing to run or look at
	}{
		{&ClaimHeldError{VM: 4242, Holder: "host=node1 run=abc"}, "retry"},
		{&NewerDeployError{VM: 4242, Ours: 11, Recorded: c}, "claim show"},
		{&UnknownDeployError{VM: 4242, Ours: 13, Recorded: c}, "claim show"},
		{&ClaimedElsewhereError{VM: 4242, Host: "node1", Recorded: c}, "claim show"},
		{&StartedAgainError{VM: 4242, Host: "node2", Recorded: c}, "onevm"},
		{&NoHandoverError{VM: 4242, Host: "node2", Why: "x"}, "onevm migrate"},
		{&AlreadyRunningError{VM: 4242, Host: "node1", Domain: "one-4242", State: "running"}, "recover --success"},
		{&DomainUnknownError{VM: 4242, Host: "node1", Domain: "one-4242", Said: "timed out"}, "retry"},
		{&MigrationUnknownError{VM: 4242, Src: "node1", Dst: "node2", Domain: "one-4242"}, "recover"},
		{&OtherVMError{VM: 4242, Recorded: c}, "claim show"},
		{&MigrationOpenError{VM: 4242, Host: "node3", Recorded: c}, "onevm recover"},
		{&BehindNATError{VM: 4242, Host: "node1", Seen: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, "README"},
		{&SharedAddressError{VM: 4242, Hosts: [2]string{"node1", "node2"}}, "README"},
		{&UnknownClaimError{VM: 4242, Recorded: c}, "claim show"},
		{&ClaimFormatError{Who: "the hook on node1", Format: 1, Need: 2}, "upgrade"},
		{&LeaseHeldError{Object: "one/rbdfence.claim.4242", Holder: "x"}, "retry"},
		{&IncompleteError{Problems: []string{"a", "b"}}, "VM log"},
		{ErrSeenUnknown.(*seenUnknownError), "retry"},
	}
	seen := map[string]bool{}
	for _, c := range all {
		b := c.err.Brief()
		name := reflect.TypeOf(c.err).Elem().Name()
		seen[name] = true
		if len(b) > BriefMax || !strings.Contains(b, c.want) || strings.Contains(b, "VM 4242") {
			t.Errorf("%s: brief %q (%d characters): want at most %d, naming %q, no VM id", name, b, len(b), BriefMax, c.want)
		}
		if BriefOf(c.err.(error)) != b {
			t.Errorf("%s: BriefOf", name)
		}
	}
	for _, name := range errorTypes(t) {
		if !seen[name] {
			t.Errorf("%s has no row here: give it a Brief and a row", name)
		}
	}
}

// errorTypes lists the package's struct types named ...Error.
func errorTypes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.TYPE {
					continue
				}
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					if _, isStruct := ts.Type.(*ast.StructType); isStruct && strings.HasSuffix(ts.Name.Name, "Error") {
						out = append(out, ts.Name.Name)
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no error types found")
	}
	return out
}
