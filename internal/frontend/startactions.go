package frontend

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/xml"
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
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// MaxStdin bounds what a driver reads from oned on stdin.
const MaxStdin = 64 << 20

// ReadStdin reads a driver's stdin, at most MaxStdin bytes.
func ReadStdin(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxStdin+1))
	if err != nil {
		return nil, errorf(outcome.Usage, -1, "reading stdin: %v", err)
	}
	if len(b) > MaxStdin {
		return nil, errorf(outcome.Usage, -1, "stdin is larger than %d bytes", MaxStdin)
	}
	return b, nil
}

// DecodeBase64 decodes what oned sends local actions and TM scripts on
// stdin (Base64.strict_encode64, possibly wrapped): blanks and newlines are
// ignored, anything else must be standard base64 with padding.
func DecodeBase64(what string, b []byte) ([]byte, error) {
	clean := bytes.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\r', '\n':
			return -1
		}
		return r
	}, b)
	if len(clean) == 0 {
		return nil, fmt.Errorf("%s: stdin is empty, want base64", what)
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
	n, err := base64.StdEncoding.Decode(out, clean)
	if err != nil {
		return nil, fmt.Errorf("%s: stdin is not base64 (%v)", what, err)
	}
	return out[:n], nil
}

// xmlRoot returns the name of the root element of a well-formed XML
// document, or an error naming what is wrong.
func xmlRoot(doc []byte) (string, error) {
	dec := xml.NewDecoder(bytes.NewReader(doc))
	root := ""
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("not well-formed XML: %s", clip(err.Error()))
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				if root != "" {
					return "", errors.New("not well-formed XML: more than one root element")
				}
				root = t.Name.Local
			}
			depth++
		case xml.EndElement:
			depth--
		case xml.CharData:
			if depth == 0 && len(bytes.TrimSpace(t)) > 0 {
				return "", errors.New("not well-formed XML: text outside the root element")
			}
		}
	}
	if root == "" {
		return "", errors.New("not XML: no root element")
	}
	return root, nil
}

// parseVMID parses a VM id argument.
func parseVMID(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return -1, fmt.Errorf("VM id %q is not a non-negative integer", clip(s))
	}
	return n, nil
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

// readActionStdin reads a VMM action's base64 stdin for VM vm (and names the VM
// in the log from here on): what names the document in an error, undone
// says what did not happen because of it ("nothing was started").
func readActionStdin(e *Env, vm int, stdin io.Reader, what, undone string) ([]byte, error) {
	e.Log.SetVM(vm)
	raw, err := ReadStdin(stdin)
	if err != nil {
		return nil, err
	}
	doc, err := DecodeBase64(what, raw)
	if err != nil {
		return nil, errorf(outcome.Usage, vm, "VM %d: %v; %s", vm, err, undone)
	}
	return doc, nil
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
		return errorf(outcome.Usage, a.VM, "VM %d: %v; nothing was started", a.VM, err)
	}
	if dom.VMID >= 0 && dom.VMID != a.VM {
		return errorf(outcome.Usage, a.VM, "VM %d: the domain XML on stdin is %s, another VM's; nothing was started", a.VM, clip(dom.Name))
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
			return errorf(outcome.Failure, a.VM, "VM %d: the domain XML has no <one:system_datastore> and oned gave no system datastore: cannot name the remote deployment file", a.VM)
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
			return nil, errorf(outcome.Failure, a.VM, "VM %d: reading %s: %v", a.VM, name, err)
		}
		data, err := vmDirFile(name, raw)
		if err != nil {
			return nil, errorf(outcome.Failure, a.VM, "VM %d: %s next to %s: %v; the remote deploy was not run", a.VM, name, a.LocalFile, err)
		}
		out = append(out, vmDirFileData{name, data})
	}
	return out, nil
}

// maxInlineFiles bounds what withVMDirFiles puts on the remote command
// line (Linux takes at most 128 KiB per argument, quoting adds some).
const maxInlineFiles = 48 << 10

// withVMDirFiles returns the remote command that writes files into dir and
// then runs remote, in one ssh session as the driver's own deploy does
// (one_vmm_exec.rb:443-470 of release-7.4.0), or nil when the files are too
// large for a command line. The contents travel as arguments, printed by
// the shell's printf: no tool of the host is assumed.
func withVMDirFiles(dir string, files []vmDirFileData, remote []string) []string {
	if len(files) == 0 {
		return remote
	}
	size := 0
	for _, f := range files {
		size += len(f.data)
		if bytes.IndexByte(f.data, 0) >= 0 {
			return nil
		}
	}
	if size > maxInlineFiles {
		return nil
	}
	script := `mkdir -p "$1"`
	args := []string{"sh", "-c", "", "rbdfence-deploy", dir}
	for i, f := range files {
		script += fmt.Sprintf(` && printf '%%s' "$%d" > "$1/%s"`, i+2, f.name)
		args = append(args, string(f.data))
	}
	script += fmt.Sprintf(` && shift %d && exec "$@"`, len(files)+1)
	args[2] = script
	return append(args, remote...)
}

// copyVMDirFiles writes files into remoteDir on host, one ssh call each:
// for files too large for withVMDirFiles.
func (e *Env) copyVMDirFiles(ctx context.Context, vm int, host, remoteDir string, files []vmDirFileData) error {
	for _, f := range files {
		var stderr capBuffer
		stderr.max = 4096
		cmd := "mkdir -p " + shellQuote(remoteDir) + " && cat > " + shellQuote(remoteDir+"/"+f.name)
		code, err := e.remoteAction(ctx, host, []string{"sh", "-c", cmd}, f.data, io.Discard, &stderr)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, orDash(lastLine(stderr.buf.Bytes())))
		}
		if err != nil {
			return errorf(outcome.Failure, vm, "VM %d: cannot write %s/%s on %s: %v", vm, remoteDir, f.name, host, err)
		}
	}
	return nil
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

// recordInstance records the client addresses of the instance that now
// runs on the host in the VM's claim: a later start elsewhere blocklists
// them even if that instance is cut off from Ceph then. Best effort: a
// failure is logged, the start has succeeded.
func (e *Env) recordInstance(ctx context.Context, res *StartResult) {
	if res == nil || res.Skipped || res.VM == nil || len(res.VM.Disks) == 0 {
		return
	}
	if res.FailedOpen {
		e.Log.Error("VM %d started without the check (fence.fail_open): its client addresses are not recorded", res.VM.ID)
		return
	}
	req := &hoststep.Request{Op: hoststep.OpRecord, VM: res.VM.ID, Seq: res.Seq, Host: res.Host, Run: res.Run,
		Source: engine.SourceFrontend, Disks: res.VM.Disks}
	resp, err := e.hostStep(ctx, res.Host, req, onHost)
	if err == nil && !resp.OK {
		err = errors.New(resp.Error)
	}
	if err != nil {
		e.Log.Error("VM %d started, but its client addresses were not recorded (a later start elsewhere only fences what it sees): %v", res.VM.ID, err)
		return
	}
	n := 0
	if resp.Claim != nil {
		n = len(resp.Claim.Addrs)
	}
	e.Log.Info("VM %d: recorded %d client address(es) of the instance on %s", res.VM.ID, n, res.Host)
}

// RestoreArgs is the local restore action's command line as oned passes
// it: <checkpoint> <host> <deploy_id> <vmid> <host>.
type RestoreArgs struct {
	Checkpoint string
	Host       string
	DeployID   string
	VM         int
}

// ParseRestoreArgs checks the restore action's arguments.
func ParseRestoreArgs(args []string) (RestoreArgs, error) {
	const usage = "usage: restore-rbdfence <checkpoint> <host> <deploy_id> <vmid> <host> (base64 driver action XML on stdin), as oned runs a local restore action"
	if len(args) != 5 && len(args) != 4 {
		return RestoreArgs{}, errorf(outcome.Usage, -1, "wrong number of arguments (%d); %s", len(args), usage)
	}
	a := RestoreArgs{Checkpoint: args[0], Host: args[1], DeployID: args[2]}
	vm, err := parseVMID(args[3])
	if err != nil {
		return a, errorf(outcome.Usage, -1, "%v; %s", err, usage)
	}
	a.VM = vm
	if err := checkHost("host", a.Host); err != nil {
		return a, errorf(outcome.Usage, vm, "%v; %s", err, usage)
	}
	if len(args) == 5 && args[4] != a.Host {
		return a, errorf(outcome.Usage, vm, "hosts %q and %q differ; %s", clip(args[1]), clip(args[4]), usage)
	}
	if !filepath.IsAbs(a.Checkpoint) {
		return a, errorf(outcome.Usage, vm, "checkpoint %q is not an absolute path; %s", clip(a.Checkpoint), usage)
	}
	return a, nil
}

// Restore is the local restore action: prestart, then the remote restore
// with the driver action XML on stdin, relaying its output and exit code.
func Restore(ctx context.Context, e *Env, args []string, stdin io.Reader) error {
	a, err := ParseRestoreArgs(args)
	if err != nil {
		return err
	}
	msg, err := readActionStdin(e, a.VM, stdin, "driver action XML", "nothing was restored")
	if err != nil {
		return err
	}
	root, err := xmlRoot(msg)
	if err != nil {
		return errorf(outcome.Usage, a.VM, "VM %d: driver action on stdin: %v; nothing was restored", a.VM, err)
	}
	if root != "VMM_DRIVER_ACTION_DATA" {
		return errorf(outcome.Usage, a.VM, "VM %d: stdin is a <%s> document, want <VMM_DRIVER_ACTION_DATA>; nothing was restored", a.VM, clip(root))
	}
	pctx, cancel := context.WithTimeout(ctx, time.Duration(e.Cfg.Timeouts.Oned))
	res, req, err := e.prepareStart(pctx, StartInput{VM: a.VM, Host: a.Host, Seq: -1})
	cancel()
	if err != nil {
		return err
	}
	script := path.Join(e.Cfg.OpenNebula.RemoteDir, "vmm/kvm/restore")
	code, err := e.startThenRun(ctx, res, req, remoteStart{vm: a.VM, what: "restore",
		argv:  []string{script, a.Checkpoint, a.Host, a.DeployID, strconv.Itoa(a.VM), a.Host},
		stdin: msg, stdout: e.Stdout})
	if err != nil {
		return err
	}
	if code != 0 {
		return &ExitError{What: "remote restore on " + a.Host, Code: code}
	}
	e.Log.Info("VM %d restored on %s", a.VM, a.Host)
	return nil
}
