// Package domstate asks libvirt, read-only and within a timeout, in which
// state a domain is on this host (`virsh --readonly domstate NAME`) and
// whether a job of it runs (`virsh --readonly domjobinfo NAME`). The
// host step uses it; the libvirt hook must never call back into libvirt
// (libvirtd waits for the hook: a deadlock).
package domstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/domxml"
)

// State is a domain state as virsh prints it ("running", "paused", "shut
// off", ...); "" when the domain does not exist.
type State string

// PMSuspended is the state of a domain whose guest suspended itself to RAM
// (its QEMU runs; OpenNebula's restore wakes it with dompmwakeup).
const PMSuspended State = "pmsuspended"

// Active reports whether a QEMU process of the domain may exist: every
// state but "shut off", "crashed" and no domain at all.
func (s State) Active() bool {
	switch s {
	case "", "shut off", "crashed":
		return false
	}
	return true
}

// URI is the libvirt connection: $LIBVIRT_DEFAULT_URI, else qemu:///system
// (OpenNebula's kvmrc LIBVIRT_URI).
func URI() string {
	if u := os.Getenv("LIBVIRT_DEFAULT_URI"); u != "" {
		return u
	}
	return "qemu:///system"
}

// Query returns domain's state. A domain libvirt does not know is State ""
// with no error; an error means libvirt could not be asked (no virsh, no
// libvirtd, the timeout).
func Query(ctx context.Context, domain string, timeout time.Duration) (State, error) {
	out, stderr, err := virsh(ctx, timeout, "domstate", domain)
	if errors.Is(err, errNoAnswer) {
		return "", err
	}
	return Parse(out, stderr, err)
}

var errNoAnswer = errors.New("no answer")

// virsh runs `virsh --readonly -c URI() VERB -- DOMAIN` within timeout. An
// error wrapping errNoAnswer means it did not end in time; any other error
// is the command's own (see Parse, notFound).
func virsh(ctx context.Context, timeout time.Duration, verb, domain string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "virsh", "--readonly", "-c", URI(), verb, "--", domain)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		return "", "", fmt.Errorf("virsh %s %s: %w within %s", verb, domain, errNoAnswer, timeout)
	}
	return out.String(), errb.String(), err
}

// notFound reports whether virsh failed because libvirt has no such
// domain: virsh says "failed to get domain", libvirt's VIR_ERR_NO_DOMAIN
// "Domain not found".
func notFound(err error, stderr string) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && (strings.Contains(stderr, "failed to get domain") || strings.Contains(stderr, "Domain not found"))
}

// Parse turns virsh domstate's output and exit into a State.
func Parse(stdout, stderr string, err error) (State, error) {
	if err != nil {
		if notFound(err, stderr) {
			return "", nil
		}
		return "", fmt.Errorf("virsh domstate: %v: %s", err, strings.TrimSpace(stderr))
	}
	s := strings.TrimSpace(stdout)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if s == "" {
		return "", fmt.Errorf("virsh domstate: empty answer")
	}
	return State(s), nil
}

// Instance returns the `<one:deployment_time>` of domain's live XML (`virsh
// --readonly dumpxml NAME`): the identity of the deployment file the
// running domain was created from (domxml.Domain.Instance). 0 with no error
// when libvirt has no such domain or its XML carries no OpenNebula
// metadata; an error when libvirt could not be asked or the XML cannot be
// read.
func Instance(ctx context.Context, domain string, timeout time.Duration) (int64, error) {
	out, stderr, err := virsh(ctx, timeout, "dumpxml", domain)
	switch {
	case err == nil:
	case notFound(err, stderr):
		return 0, nil
	case errors.Is(err, errNoAnswer):
		return 0, err
	default:
		return 0, fmt.Errorf("virsh dumpxml: %v: %s", err, strings.TrimSpace(stderr))
	}
	d, err := domxml.Parse([]byte(out))
	if err != nil {
		return 0, fmt.Errorf("virsh dumpxml %s: %v", domain, err)
	}
	return d.Instance(), nil
}

// Job is what `virsh domjobinfo` says of a domain's current job: its "Job
// type" ("None" when no job runs; "Unbounded" or "Bounded" while one does)
// and, where libvirt says it, its "Operation" ("Outgoing migration", ...).
// Type "" means libvirt has no such domain.
type Job struct {
	Type, Operation string
}

// Idle reports whether no job of the domain runs.
func (j Job) Idle() bool { return j.Type == "None" }

// String is the job in virsh's words.
func (j Job) String() string {
	s := "Job type: " + j.Type
	if j.Operation != "" {
		s += ", Operation: " + j.Operation
	}
	return s
}

// QueryJob returns domain's current job. A domain libvirt does not know is
// Job{} with no error; an error means libvirt could not be asked or did
// not say (no virsh, no libvirtd, the timeout, a driver without job
// information, a domain that is not running).
func QueryJob(ctx context.Context, domain string, timeout time.Duration) (Job, error) {
	out, stderr, err := virsh(ctx, timeout, "domjobinfo", domain)
	if errors.Is(err, errNoAnswer) {
		return Job{}, err
	}
	return ParseJob(out, stderr, err)
}

// ParseJob turns virsh domjobinfo's output and exit into a Job: only a
// "Job type:" line is an answer.
func ParseJob(stdout, stderr string, err error) (Job, error) {
	if err != nil {
		if notFound(err, stderr) {
			return Job{}, nil
		}
		return Job{}, fmt.Errorf("virsh domjobinfo: %v: %s", err, strings.TrimSpace(stderr))
	}
	var j Job
	for _, line := range strings.Split(stdout, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Job type":
			j.Type = strings.TrimSpace(v)
		case "Operation":
			j.Operation = strings.TrimSpace(v)
		}
	}
	if j.Type == "" {
		return Job{}, fmt.Errorf("virsh domjobinfo: no job type in its answer %q", strings.TrimSpace(stdout))
	}
	return j, nil
}
