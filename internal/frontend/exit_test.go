package frontend

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

// TestRefusalLineFirst: a refusal's plain line comes first on stderr,
// before the INFO lines of the run, so that 6.x (whose ERROR text is the
// whole stderr) shows the reason first, while 7.x files the INFO lines in
// the VM log and shows only the plain line.
func TestRefusalLineFirst(t *testing.T) {
	t.Setenv("RBDFENCE_CONFIG", "")
	act := func(ctx context.Context, e *Env, args []string, stdin io.Reader) error {
		e.Log.SetVM(42)
		e.Log.Info("checking 1 RBD image(s) of VM 42")
		e.Log.Info("fenced client 10.0.0.5:0/1 on one/one-7")
		return errorf(outcome.Refused, 42, "rbdfence refused the start, nothing fenced: claimed by run abc on node2")
	}
	var out, errb bytes.Buffer
	code := RunAction(context.Background(), act, nil, nil, &out, &errb)
	if code != outcome.Refused.Code() {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if lines[0] != "rbdfence refused the start, nothing fenced: claimed by run abc on node2" || len(lines) != 3 {
		t.Fatalf("stderr:\n%s", errb.String())
	}
	info7, log7 := onedsim.DriverResult(7, code, errb.String())
	if info7 != "rbdfence refused the start, nothing fenced: claimed by run abc on node2" || len(log7) != 2 || !strings.Contains(log7[1], "fenced client") {
		t.Fatalf("7.x: info %q, VM log %q", info7, log7)
	}
	info6, log6 := onedsim.DriverResult(6, code, errb.String())
	if !strings.HasPrefix(info6, "rbdfence refused the start, nothing fenced: claimed by run abc on node2 INFO: 42 rbdfence:") || len(log6) != 4 {
		t.Fatalf("6.x: info %q, VM log %q", info6, log6)
	}
	// A success: 6.x drops stderr, 7.x files the lines in the VM log.
	ok := func(ctx context.Context, e *Env, args []string, stdin io.Reader) error {
		e.Log.SetVM(42)
		e.Log.Info("fenced client 10.0.0.5:0/1 on one/one-7")
		return nil
	}
	errb.Reset()
	if code := RunAction(context.Background(), ok, nil, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, l := onedsim.DriverResult(7, 0, errb.String()); len(l) != 1 {
		t.Fatalf("7.x VM log %q", l)
	}
	if i, l := onedsim.DriverResult(6, 0, errb.String()); i != "" || l != nil {
		t.Fatalf("6.x keeps nothing of a success, got %q %q", i, l)
	}
}
