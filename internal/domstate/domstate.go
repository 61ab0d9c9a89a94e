// Package domstate asks libvirt, read-only and within a timeout, in which
// state a domain is on this host (`virsh --readonly domstate NAME`). The
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
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "virsh", "--readonly", "-c", URI(), "domstate", "--", domain)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", fmt.Errorf("virsh domstate %s: no answer within %s", domain, timeout)
	}
	return Parse(out.String(), errb.String(), err)
}

// Parse turns virsh domstate's output and exit into a State.
func Parse(stdout, stderr string, err error) (State, error) {
	var ee *exec.ExitError
	if err != nil {
		// virsh reports an unknown domain as "failed to get domain" and
		// libvirt's VIR_ERR_NO_DOMAIN text "Domain not found".
		if errors.As(err, &ee) && (strings.Contains(stderr, "failed to get domain") || strings.Contains(stderr, "Domain not found")) {
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
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "virsh", "--readonly", "-c", URI(), "dumpxml", "--", domain)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return 0, fmt.Errorf("virsh dumpxml %s: no answer within %s", domain, timeout)
	}
	if _, serr := Parse("x", errb.String(), err); serr != nil || err != nil {
		return 0, serr // nil: no such domain
	}
	d, err := domxml.Parse(out.Bytes())
	if err != nil {
		return 0, fmt.Errorf("virsh dumpxml %s: %v", domain, err)
	}
	return d.Instance(), nil
}
