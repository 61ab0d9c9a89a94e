package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/domxml"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// DeployArgs is the local deploy action's command line as oned passes it:
// <local deployment file> <host> <vmid> <host>.
type DeployArgs struct {
	LocalFile string
	Host      string
	VM        int
}

// ParseDeployArgs checks the deploy action's arguments.
func ParseDeployArgs(args []string) (DeployArgs, error) {
	const usage = "usage: deploy-rbdfence <local deployment file> <host> <vmid> <host> (base64 domain XML on stdin), as oned runs a local deploy action"
	if len(args) != 4 && len(args) != 3 {
		return DeployArgs{}, errorf(outcome.Usage, -1, "wrong number of arguments (%d); %s", len(args), usage)
	}
	a := DeployArgs{LocalFile: args[0], Host: args[1]}
	vm, err := parseVMID(args[2])
	if err != nil {
		return a, errorf(outcome.Usage, -1, "%v; %s", err, usage)
	}
	a.VM = vm
	if err := checkHost("host", a.Host); err != nil {
		return a, errorf(outcome.Usage, vm, "%v; %s", err, usage)
	}
	if len(args) == 4 && args[3] != a.Host {
		return a, errorf(outcome.Usage, vm, "hosts %q and %q differ; %s", clip(args[1]), clip(args[3]), usage)
	}
	if a.LocalFile == "" || !filepath.IsAbs(a.LocalFile) {
		return a, errorf(outcome.Usage, vm, "deployment file %q is not an absolute path; %s", clip(a.LocalFile), usage)
	}
	return a, nil
}

// deploySeq returns N for a deployment file named "deployment.N", else -1.
func deploySeq(file string) int {
	s, ok := strings.CutPrefix(filepath.Base(file), "deployment.")
	if !ok {
		return -1
	}
	n, err := parseVMID(s)
	if err != nil {
		return -1
	}
	return n
}

// Deploy is the local deploy action: prestart, then the remote deploy on
// the host with the domain XML on stdin, its stdout (the DEPLOY_ID) relayed
// to e.Stdout, its stderr to e.Stderr and its exit code kept (*ExitError).
// If prestart refuses, the remote deploy is not run. After a successful
// deploy the new instance's client addresses are recorded (best effort).
func Deploy(ctx context.Context, e *Env, args []string, stdin io.Reader) error {
	a, err := ParseDeployArgs(args)
	if err != nil {
		return err
	}
	domain, err := readActionStdin(e, a.VM, stdin, "domain XML", "nothing was started")
	if err != nil {
		return err
	}
	dom, err := domxml.Parse(domain)
	if err != nil {
		return errorf(outcome.Usage, a.VM, "%v; nothing was started", err)
	}
	if dom.VMID >= 0 && dom.VMID != a.VM {
		return errorf(outcome.Usage, a.VM, "the domain XML on stdin is %s, another VM's; nothing was started", clip(dom.Name))
	}
	remoteFile := ""
	if dom.OpenNebula != nil && dom.OpenNebula.SystemDatastore != "" {
		remoteFile = strings.TrimRight(dom.OpenNebula.SystemDatastore, "/") + "/" + filepath.Base(a.LocalFile)
	}

	pctx, cancel := context.WithTimeout(ctx, time.Duration(e.Cfg.Timeouts.Oned))
	res, req, err := e.prepareStart(pctx, StartInput{VM: a.VM, Host: a.Host, Seq: deploySeq(a.LocalFile), Instance: dom.Instance()})
	cancel()
	if err != nil {
		return err
	}
	if remoteFile == "" {
		if res.VM == nil || res.VM.SystemDSID < 0 {
			return errorf(outcome.Failure, a.VM, "the domain XML has no <one:system_datastore> and oned gave no system datastore: cannot name the remote deployment file; nothing was started")
		}
		remoteFile = path.Join(e.Cfg.OpenNebula.DatastoreLocation, strconv.Itoa(res.VM.SystemDSID), strconv.Itoa(a.VM), filepath.Base(a.LocalFile))
	}
	files, err := e.readVMDirFiles(a)
	if err != nil {
		return err
	}
	script := path.Join(e.Cfg.OpenNebula.RemoteDir, "vmm/kvm/deploy")
	out := &capBuffer{max: 4096}
	code, err := e.startThenRun(ctx, res, req, remoteStart{vm: a.VM, what: "deploy",
		argv:  []string{script, remoteFile, a.Host, strconv.Itoa(a.VM), a.Host},
		stdin: domain, dir: path.Dir(remoteFile), files: files, stdout: io.MultiWriter(e.Stdout, out)})
	if err != nil {
		return err
	}
	if code != 0 {
		return &ExitError{What: "remote deploy on " + a.Host, Code: code}
	}
	e.Log.Info("VM %d deployed on %s (DEPLOY_ID %s)", a.VM, a.Host, orDash(strings.TrimSpace(out.buf.String())))
	return nil
}

// vmDirFileData is vm.xml or ds.xml as it goes to the host.
type vmDirFileData struct {
	name string
	data []byte
}

// readVMDirFiles reads what oned's normal deploy writes into the VM's
// directory on the host before the remote deploy: vm.xml and ds.xml. For a
// local deploy action the driver wrote them next to the local deployment
// file through local steps, whose stdin is base64 (one_vmm_exec.rb:443-464
// and OpenNebulaDriver.rb:103-104 of release-7.4.0; :458-481 and :104 of
// release-6.10.5), so the files hold base64; the host's vmm/kvm/deploy
// reads them as XML (vGPU, TPM). They are decoded (vmDirFile). Files oned
// did not write are skipped.
func (e *Env) readVMDirFiles(a DeployArgs) ([]vmDirFileData, error) {
	var out []vmDirFileData
	for _, name := range []string{"vm.xml", "ds.xml"} {
		raw, err := os.ReadFile(filepath.Join(filepath.Dir(a.LocalFile), name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, errorf(outcome.Failure, a.VM, "reading %s: %v; the remote deploy was not run", name, err)
		}
		data, err := vmDirFile(name, raw)
		if err != nil {
			return nil, errorf(outcome.Failure, a.VM, "%s next to %s: %v; the remote deploy was not run", name, a.LocalFile, err)
		}
		out = append(out, vmDirFileData{name, data})
	}
	return out, nil
}

// vmDirFile returns the XML to write on the host for vm.xml or ds.xml as
// the driver left it next to the local deployment file: base64 (what a
// local step writes) is decoded; XML (a file written some other way) and
// an empty file (no such element in the driver message) are kept as they
// are. The decoded document must be a <VM> (vm.xml) or <DATASTORE> (ds.xml).
func vmDirFile(name string, raw []byte) ([]byte, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] == '<' {
		return raw, nil
	}
	doc, err := DecodeBase64(name, t)
	if err != nil {
		return nil, fmt.Errorf("neither XML nor base64 XML (%v)", err)
	}
	want := map[string]string{"vm.xml": "VM", "ds.xml": "DATASTORE"}[name]
	root, err := xmlRoot(doc)
	if err != nil {
		return nil, fmt.Errorf("decoded from base64: %v", err)
	}
	if want != "" && root != want {
		return nil, fmt.Errorf("decoded from base64: a <%s> document, want <%s>", clip(root), want)
	}
	return doc, nil
}
