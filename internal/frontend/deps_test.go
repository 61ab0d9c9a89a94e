package frontend

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The front-end drivers (and with them internal/opennebula, events and
// collision) and the oned stand-in must build without cgo and never pull in
// go-ceph: a front-end may have no Ceph libraries.
func TestDriversArePureGo(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Fatal("the go tool is needed to check the drivers' dependencies")
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mains, _ := filepath.Glob(filepath.Join(root, "drivers", "*", "main.go"))
	if len(mains) < 5 {
		t.Fatalf("found %d driver mains, want the 5 front-end drivers (deploy, restore, migrate, prestart, onedconf)", len(mains))
	}
	env := append(os.Environ(), "CGO_ENABLED=0")
	list := exec.Command(gobin, "list", "-e", "-deps", "-f", "{{.ImportPath}}{{if .Error}} ERROR: {{.Error}}{{end}}{{if .CgoFiles}} CGO{{end}}",
		"./drivers/...", "./internal/frontend")
	list.Dir, list.Env = root, env
	out, err := list.CombinedOutput()
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
	build := exec.Command(gobin, "build", "-o", t.TempDir()+"/", "./drivers/...")
	build.Dir, build.Env = root, env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./drivers/...: %v\n%s", err, out)
	}
}
