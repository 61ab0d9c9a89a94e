package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hook"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// TestExitCode: the hook exits with the code of its error's kind, for every
// kind of internal/outcome, with one stderr line.
func TestExitCode(t *testing.T) {
	for _, k := range outcome.All() {
		var err error
		if k != outcome.OK {
			err = &hook.Error{Kind: k, Domain: "one-42", Action: hook.ActFence, Err: errors.New("why")}
		}
		var stderr bytes.Buffer
		if got := exitCode(err, &stderr); got != k.Code() {
			t.Errorf("%v: exit %d, want %d", k, got, k.Code())
		}
		if want := map[bool]int{true: 0, false: 1}[err == nil]; strings.Count(stderr.String(), "\n") != want {
			t.Errorf("%v: stderr %q", k, stderr.String())
		}
	}
}

func TestBadArguments(t *testing.T) {
	var stderr bytes.Buffer
	if got := run([]string{"one-42", "prepare"}, strings.NewReader(""), &stderr); got != outcome.Usage.Code() || !strings.HasPrefix(stderr.String(), "rbdfence: usage: ") {
		t.Fatalf("exit %d, stderr %q", got, stderr.String())
	}
}

// TestVersion: --version names the build and the claim format, in the
// line the host step parses (it reports both to the front-end, which
// refuses a start beside a hook older than its claim format).
func TestVersion(t *testing.T) {
	var stderr bytes.Buffer
	if got := run([]string{"--version"}, strings.NewReader(""), &stderr); got != 0 {
		t.Fatalf("exit %d, stderr %q", got, stderr.String())
	}
	v, f, err := hoststep.ParseHookVersion(stderr.String())
	if err != nil || v != version || f != engine.ClaimFormat {
		t.Fatalf("%q: version %q claim format %d (%v), want %q %d", stderr.String(), v, f, err, version, engine.ClaimFormat)
	}
}
