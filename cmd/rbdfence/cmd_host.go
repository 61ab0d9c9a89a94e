package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"time"

	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// runHost is the host-side step of the front-end drivers: one JSON request on
// stdin, one JSON response on stdout (always, also on failure).
func runHost(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("host", flag.ContinueOnError)
	var c common
	c.register(fs)
	var req *hoststep.Request
	write := func(r *hoststep.Response) error {
		return json.NewEncoder(stdout).Encode(hoststep.Reply(req, r))
	}
	if err := parseFlags(fs, args); err != nil {
		_ = write(&hoststep.Response{Kind: outcome.Usage, Error: err.Error()})
		return err
	}
	req, err := hoststep.ReadRequest(stdin)
	if err != nil {
		r := &hoststep.Response{Kind: outcome.Usage, Error: err.Error()}
		if req != nil {
			r.Op = req.Op // an incompatible request: the answer names its op
		}
		_ = write(r)
		return outcome.Errorf(outcome.Usage, "%w", err)
	}
	cfg, err := c.load()
	if err != nil {
		_ = write(&hoststep.Response{Op: req.Op, Kind: outcome.Usage, Error: err.Error()})
		return err
	}
	start := time.Now()
	ctx, cancel := bounded(ctx, cfg)
	defer cancel()
	resp := fencer.Do(ctx, cfg, req)
	recordMetrics(cfg, nil, "host_"+req.Op, start, resp.Report, resp.Kind)
	// The step spooled its events durably; deliver them (and older ones)
	// when this host can reach oned. The front-end also publishes its copy:
	// ids are the same, oned counts each once.
	_, _ = collision.Publish(ctx, cfg, nil)
	if err := write(resp); err != nil {
		return err
	}
	if !resp.OK {
		return &hostStepError{resp}
	}
	return nil
}

type hostStepError struct{ r *hoststep.Response }

func (e *hostStepError) Error() string { return e.r.Error }

func (e *hostStepError) Outcome() outcome.Kind { return e.r.Kind }
