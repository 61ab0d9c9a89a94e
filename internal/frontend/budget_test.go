package frontend

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// TestHostStepBudget (issue 11 item 9): a host step may take up to
// timeouts.total on the host (its own bound), after ssh took up to
// timeouts.ssh to connect. A slow but legitimate step that outlasts
// timeouts.ssh must not be cut off by the front-end, in Prestart's run as
// in hostStep itself; one that outlasts the whole budget still is.
func TestHostStepBudget(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "rbdfence-host")
	// Reads the request, takes 2.5 s (a slow fence), answers OK.
	script := "#!/bin/sh\ncat >/dev/null\nsleep \"$SLOW\"\necho '{\"ok\":true,\"op\":\"check\"}'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.OpenNebula.Remote = "local"
	cfg.OpenNebula.LocalBinary = bin
	cfg.Timeouts.SSH = config.Duration(1 * time.Second)
	cfg.Timeouts.Total = config.Duration(4 * time.Second)
	e := &Env{Cfg: cfg, Log: NewLog(nil, -1)}
	// A check (a start with remote: local first asks the host what runs
	// there over ssh, which this test has not).
	req := &hoststep.Request{Op: hoststep.OpCheck, VM: 7, Seq: 1, Host: "node1", Run: "r", Source: "frontend"}

	t.Setenv("SLOW", "2.5")
	ctx, cancel := e.stepContext(context.Background())
	defer cancel()
	resp, err := e.hostStep(ctx, "node1", req, anywhere)
	if err != nil || !resp.OK {
		t.Fatalf("a 2.5 s step with timeouts.ssh 1s and timeouts.total 4s must complete: %+v %v", resp, err)
	}

	t.Setenv("SLOW", "30")
	start := time.Now()
	ctx2, cancel2 := e.stepContext(context.Background())
	defer cancel2()
	if _, err := e.hostStep(ctx2, "node1", req, anywhere); err == nil {
		t.Fatal("a step past its whole budget must be cut off")
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("cut off after %s", took)
	}
}
