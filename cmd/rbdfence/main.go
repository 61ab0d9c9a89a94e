// Command rbdfence is the operator's CLI and the host-side step of the
// OpenNebula drivers: it finds every client of a VM's RBD images and fences
// the foreign ones. Run "rbdfence help" for the verbs and exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

const usageHead = `usage: rbdfence <verb> [flags]

verbs:
  check  --image POOL/IMAGE [...]   dry run: show every client and what fence would do
  check  --vm ID | --all            the same for a VM's disks (from oned); a running VM's instance is kept
  fence  --image POOL/IMAGE [...]   blocklist and unlock every foreign client
  host   <op>                       host-side step of the OpenNebula drivers (JSON on stdin/stdout)
  claim  show --vm ID --pool POOL   show a VM's claim
  claim  reset --vm ID [--pool P]   empty a VM's claim (audited, raises an event; refused while a run holds it)
  claim  gc [--apply] [--pool P]    claims of VMs oned reports DONE or does not know (dry run without --apply)
  events [--vm ID] [--since T] [--json]   list lock-collision events of all VMs (from oned)
  events flush [--host NAME] [--no-hosts]  deliver the spooled events to oned: this machine's,
                                    then every KVM host's, collected over ssh (front-end)
  spool  list | ack                 host side of that collection (JSON on stdout; ack: ids on stdin)
  blocklist ls [--all]              blocklist entries rbdfence added (VM, image, expiry, time left)
  unfence ADDRESS | --vm ID | --host NAME [--yes]  remove our blocklist entries (needs the blocklistop=rm cap)
  fence-host [--host NAME|ID] [--whole-address] [--host-addr IP] [--quiet 2m]
                                    HA hook fence: blocklist every Ceph client of the VMs on a failed
                                    host (ERROR/OFFLINE, silent); without --host, the host's XML
                                    base64 on stdin (OpenNebula's ft/fence_host.sh contract)
  doctor [--role auto|host|frontend|all] [--root DIR]  check config, Ceph caps, hook, wrappers, VM_MAD, oned
  version                           print the version

common flags: --config FILE (or $RBDFENCE_CONFIG; default /etc/one/rbdfence.yaml)
  --mon-host H[,H] --id USER --keyring FILE --ceph-conf FILE --json

`

// usage ends with the exit codes, from the one table (internal/outcome).
var usage = usageHead + "exit codes:\n" + outcome.Text()

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func (e *usageError) Outcome() outcome.Kind { return outcome.Usage }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

var errFound = outcome.Errorf(outcome.Found, "foreign clients found")

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, ceph.QuietLibrados()))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return outcome.Usage.Code()
	}
	var err error
	switch args[0] {
	case "check":
		err = runCheck(ctx, args[1:], stdout, stderr, true)
	case "fence":
		err = runCheck(ctx, args[1:], stdout, stderr, false)
	case "host":
		err = runHost(ctx, args[1:], stdin, stdout, stderr)
	case "spool":
		err = runSpool(ctx, args[1:], stdin, stdout)
	case "claim":
		err = runClaim(ctx, args[1:], stdout, stderr)
	case "events":
		err = runEvents(ctx, args[1:], stdout, stderr)
	case "blocklist":
		err = runBlocklist(ctx, args[1:], stdout, stderr)
	case "unfence":
		err = runUnfence(ctx, args[1:], stdin, stdout, stderr)
	case "fence-host":
		err = runFenceHost(ctx, args[1:], stdin, stdout, stderr)
	case "doctor":
		err = runDoctor(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "rbdfence", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = usagef("unknown verb %q (try: rbdfence help)", args[0])
	}
	return exitCode(err, stderr)
}

// exitCode maps an error to its exit code (internal/outcome) and prints it
// as one line.
func exitCode(err error, stderr io.Writer) int {
	var r interface{ reported() bool }
	if err == nil || errors.Is(err, errFound) || (errors.As(err, &r) && r.reported()) {
		return outcome.Of(err).Code()
	}
	fmt.Fprintln(stderr, "rbdfence: "+strings.Join(strings.Fields(err.Error()), " "))
	return outcome.Of(err).Code()
}
