package opennebula_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The front-end packages must build without cgo and never pull in go-ceph:
// a front-end may have no Ceph libraries.
func TestPureGoDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to check dependencies: %v", err)
	}
	pkgs := []string{
		"github.com/rbdfence/rbdfence/internal/opennebula",
		"github.com/rbdfence/rbdfence/internal/events",
		"github.com/rbdfence/rbdfence/test/onedsim/cmd/onedsim",
	}
	args := append([]string{"list", "-e", "-deps", "-f", "{{.ImportPath}}{{if .Error}} ERROR: {{.Error}}{{end}}{{if .CgoFiles}} CGO{{end}}"}, pkgs...)
	cmd := exec.Command(gobin, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.Contains(line, "github.com/ceph/go-ceph"):
			t.Errorf("depends on go-ceph: %s", line)
		case strings.Contains(line, " ERROR: "):
			t.Errorf("does not build with CGO_ENABLED=0: %s", line)
		case strings.HasSuffix(line, " CGO"):
			t.Errorf("uses cgo: %s", line)
		}
	}
}
