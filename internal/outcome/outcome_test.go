package outcome_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/frontend"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

type kinded struct{ k outcome.Kind }

func (e kinded) Error() string         { return "kinded" }
func (e kinded) Outcome() outcome.Kind { return e.k }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want outcome.Kind
	}{
		{"nil", nil, outcome.OK},
		{"untyped", errors.New("boom"), outcome.Failure},
		{"claim held", &engine.ClaimHeldError{VM: 1}, outcome.Refused},
		{"newer deploy, wrapped", fmt.Errorf("start: %w", &engine.NewerDeployError{VM: 1}), outcome.Refused},
		{"claimed elsewhere", &engine.ClaimedElsewhereError{VM: 1}, outcome.Refused},
		{"incomplete", &engine.IncompleteError{Problems: []string{"x"}}, outcome.Failure},
		{"says its kind", kinded{outcome.Unavailable}, outcome.Unavailable},
		{"outermost kind wins", outcome.Errorf(outcome.Usage, "bad: %w", kinded{outcome.Unavailable}), outcome.Usage},
		{"kind over class", outcome.Errorf(outcome.Failure, "x: %w", &engine.ClaimHeldError{}), outcome.Failure},
		{"unknown VM", fmt.Errorf("check --vm 9: %w", opennebula.ErrNotFound), outcome.Usage},
		{"oned unreachable", fmt.Errorf("listing events: %w", opennebula.ErrUnreachable), outcome.Unavailable},
		{"oned refused the credentials", opennebula.ErrAuthentication, outcome.Unavailable},
		{"oned says not authorized", opennebula.ErrAuthorization, outcome.Unavailable},
		{"oned answered nonsense", opennebula.ErrProtocol, outcome.Failure},
	} {
		if got := outcome.Of(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestTable pins the exit codes and wire names every released peer and
// script relies on.
func TestTable(t *testing.T) {
	for _, tc := range []struct {
		k    outcome.Kind
		code int
		name string
	}{
		{outcome.OK, 0, ""}, {outcome.Failure, 1, "failure"}, {outcome.Usage, 2, "usage"},
		{outcome.Unavailable, 3, "ceph"}, {outcome.Refused, 4, "refused"}, {outcome.Found, 5, "found"},
	} {
		if tc.k.Code() != tc.code || tc.k.Name() != tc.name || outcome.Parse(tc.name) != tc.k {
			t.Errorf("%v: code %d name %q parse %v; want %d %q", tc.k, tc.k.Code(), tc.k.Name(), outcome.Parse(tc.name), tc.code, tc.name)
		}
	}
	if got := outcome.Parse("a-kind-from-a-newer-peer"); got != outcome.Failure {
		t.Errorf("unknown name: %v, want failure", got)
	}
	seen := map[int]bool{}
	for _, k := range outcome.All() {
		if seen[k.Code()] {
			t.Errorf("exit code %d used twice", k.Code())
		}
		seen[k.Code()] = true
	}
}

// TestNewKindIsOnePlace adds a refusal kind the way a change to outcome.go
// would (one table row, one class row) and checks that the classifier, the
// host-step JSON, the drivers' exit and the README table all follow with no
// other change.
func TestNewKindIsOnePlace(t *testing.T) {
	busy, undo := outcome.AddKindForTest("busy", 6, "another run holds the VM's claim lease", func(err error) bool {
		var h *engine.ClaimHeldError
		return errors.As(err, &h)
	})
	defer undo()
	err := fmt.Errorf("start: %w", &engine.ClaimHeldError{VM: 42, Holder: "run x"})
	if outcome.Of(err) != busy || outcome.Code(err) != 6 || busy.String() != "busy" {
		t.Fatalf("classifier: %v code %d", outcome.Of(err), outcome.Code(err))
	}
	// Host step: the host writes the kind, the front-end reads it back.
	b, _ := json.Marshal(&hoststep.Response{Op: hoststep.OpStart, Kind: outcome.Of(err), Error: err.Error()})
	if !strings.Contains(string(b), `"kind":"busy"`) {
		t.Fatalf("host-step JSON %s", b)
	}
	resp, rerr := hoststep.ReadResponse(bytes.NewReader(b))
	if rerr != nil || resp.Kind != busy {
		t.Fatalf("read back: %v %v", resp, rerr)
	}
	// Drivers: the exit code of the kind.
	var stderr bytes.Buffer
	if code := frontend.Exit(&frontend.Error{Kind: resp.Kind, VM: 42, Msg: resp.Error}, &stderr); code != 6 {
		t.Fatalf("driver exit %d", code)
	}
	if !strings.Contains(outcome.Markdown(), "| 6 | another run holds the VM's claim lease |") {
		t.Fatalf("README table:\n%s", outcome.Markdown())
	}
	undo()
	if outcome.Of(err) != outcome.Refused {
		t.Fatalf("after undo: %v", outcome.Of(err))
	}
}

// TestREADMEExitTable: the README prints the one exit table, this one.
func TestREADMEExitTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if !strings.Contains(readme, outcome.Markdown()) {
		t.Fatalf("README.md does not print outcome.Markdown():\n%s", outcome.Markdown())
	}
	if n := strings.Count(readme, "| code | meaning |"); n != 1 {
		t.Fatalf("README.md has %d exit tables, want 1", n)
	}
}

func TestJSON(t *testing.T) {
	type msg struct {
		Kind outcome.Kind `json:"kind,omitempty"`
	}
	for _, tc := range []struct {
		in   string
		want outcome.Kind
	}{
		{`{}`, outcome.OK}, {`{"kind":"refused"}`, outcome.Refused}, {`{"kind":"ceph"}`, outcome.Unavailable},
		{`{"kind":"usage"}`, outcome.Usage}, {`{"kind":"failure"}`, outcome.Failure}, {`{"kind":"quota"}`, outcome.Failure},
	} {
		var m msg
		if err := json.Unmarshal([]byte(tc.in), &m); err != nil || m.Kind != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.in, m.Kind, err, tc.want)
		}
	}
	if b, _ := json.Marshal(msg{}); string(b) != `{}` {
		t.Errorf("OK is written as %s, want it left out", b)
	}
}
