package engine_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/engine/enginetest"
)

// TestIncomingInstance: the handover window is bound to the instance it
// hands over (its deployment_time). A stale copy of another deploy that
// somebody migrates with virsh into the open window is refused at `migrate
// begin` (AcceptIncoming) and at `prepare` (Start), the genuine migration is
// accepted; an unknown identity on either side follows wrongInstance.
func TestIncomingInstance(t *testing.T) {
	const live, stale = int64(1767225600), int64(1767220000)
	for _, tc := range []struct {
		name string
		// claimed is the identity the deploy's front-end and hook pass
		// (0: unknown, e.g. started before this version).
		claimed int64
		// incoming is the incoming domain's <one:deployment_time>.
		incoming int64
		accept   bool
		// want are substrings of the refusal.
		want []string
	}{
		{name: "same instance", claimed: live, incoming: live, accept: true},
		{name: "stale copy of an older deploy", claimed: live, incoming: stale, want: []string{strconv.FormatInt(stale, 10), strconv.FormatInt(live, 10), "stale copy", "destroy"}},
		{name: "incoming without metadata", claimed: live, incoming: 0, want: []string{"no <one:deployment_time>", strconv.FormatInt(live, 10)}},
		{name: "claim does not know its instance", claimed: 0, incoming: stale, accept: true},
		{name: "neither knows", claimed: 0, incoming: 0, accept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := enginetest.NewFake()
			im := img("a")
			imgs := []engine.Image{im}
			f.CreateImage(im)
			e := engine.New(f, engine.Options{})
			with := func(w engine.Who, inst int64) engine.Who { w.Instance = inst; return w }

			// Deploy #2 on src: the front-end's start (deployment file),
			// the hook's prepare and started (domain XML), then the
			// front-end's own record, which has no identity to give.
			if _, err := e.Start(ctx, with(who("src", 2, engine.SourceFrontend), tc.claimed), imgs, false); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Start(ctx, with(who("src", -1, engine.SourceHook), tc.claimed), imgs, false); err != nil {
				t.Fatal(err)
			}
			srcC := f.Open(im, "10.0.0.1", true)
			if _, err := e.Record(ctx, with(who("src", -1, engine.SourceHook), tc.claimed), imgs, engine.Scope{}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Record(ctx, who("src", 2, engine.SourceFrontend), imgs, engine.Scope{}); err != nil {
				t.Fatal(err)
			}
			if cl, _ := e.ReadClaim(ctx, "one", 42); cl.Instance != tc.claimed {
				t.Fatalf("claim after the deploy records instance %d, want %d", cl.Instance, tc.claimed)
			}
			res, err := e.OpenWindow(ctx, who("src", 3, engine.SourceFrontend), "src", "dst", time.Minute)
			if err != nil || res.Claim.Window.Instance != tc.claimed {
				t.Fatalf("premigrate: window %+v, %v; want instance %d", res.Claim.Window, err, tc.claimed)
			}

			// migrate begin on dst.
			hk := with(who("dst", -1, engine.SourceHook), tc.incoming)
			win, err := e.AcceptIncoming(ctx, hk)
			var nh *engine.NoHandoverError
			switch {
			case tc.accept && err != nil:
				t.Fatalf("migrate begin refused: %v", err)
			case !tc.accept && !errors.As(err, &nh):
				t.Fatalf("migrate begin: want *NoHandoverError, got %v (window %+v)", err, win)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("refusal %q does not say %q", err, s)
				}
			}

			// prepare on dst, with the claim's window in the mark (as a
			// mark set by an older rbdfence, or for the genuine migration
			// on the same host, would hold it).
			cl, _ := e.ReadClaim(ctx, "one", 42)
			hk.Incoming = cl.Window
			res, err = e.Start(ctx, hk, imgs, false)
			if tc.accept {
				if err != nil || !res.Handover {
					t.Fatalf("prepare of the accepted migration: %+v %v", res, err)
				}
			} else {
				var el *engine.ClaimedElsewhereError
				if !errors.As(err, &el) {
					t.Fatalf("prepare of the stale copy: want it judged as a start on a host the deploy is not claimed for, got %+v %v", res, err)
				}
			}
			if _, ok := f.Blocklisted(srcC); ok {
				t.Fatal("the running source must not be fenced")
			}
			if !tc.accept {
				return
			}
			// postmigrate: the migrated instance keeps its identity.
			dstC := f.Open(im, "10.0.0.2", true)
			_ = dstC
			res, err = e.CloseWindow(ctx, who("dst", 3, engine.SourceFrontend), imgs, "src", "dst", nil, engine.Migrated)
			if err != nil || res.Claim.Instance != tc.claimed {
				t.Fatalf("postmigrate: claim %+v, %v; want instance %d", res.Claim, err, tc.claimed)
			}
		})
	}
}

// TestRestoreKeepsInstance: a restore's front-end step has no deployment
// file (identity 0); on the same host and deploy the claim keeps the
// identity, which the checkpoint's embedded XML carries too. A new deploy
// with another identity replaces it.
func TestRestoreKeepsInstance(t *testing.T) {
	f := enginetest.NewFake()
	im := img("a")
	imgs := []engine.Image{im}
	f.CreateImage(im)
	e := engine.New(f, engine.Options{})
	w := who("h1", 4, engine.SourceFrontend)
	w.Instance = 1000
	if _, err := e.Start(ctx, w, imgs, false); err != nil {
		t.Fatal(err)
	}
	// libvirt says the saved domain is gone (the host step asks it).
	rw := who("h1", 4, engine.SourceFrontend)
	rw.Domain = engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}
	res, err := e.Start(ctx, rw, imgs, false)
	if err != nil || res.Claim.Instance != 1000 {
		t.Fatalf("restore on the same host and deploy: %+v %v; want instance 1000 kept", res.Claim, err)
	}
	res, err = e.Start(ctx, who("h2", 5, engine.SourceFrontend), imgs, false)
	if err != nil || res.Claim.Instance != 0 {
		t.Fatalf("restore of a new deploy elsewhere: %+v %v; want the identity unknown (the hook records it)", res.Claim, err)
	}
	hk := who("h2", -1, engine.SourceHook)
	hk.Instance = 1000
	if res, err = e.Start(ctx, hk, imgs, false); err != nil || res.Claim.Instance != 1000 || res.Claim.Seq != 5 {
		t.Fatalf("the hook's prepare of the restore: %+v %v; want deploy 5 with the checkpoint's identity 1000", res.Claim, err)
	}
	w = who("h3", 6, engine.SourceFrontend)
	w.Instance = 2000
	if res, err = e.Start(ctx, w, imgs, false); err != nil || res.Claim.Instance != 2000 {
		t.Fatalf("a new deploy: %+v %v; want its own identity", res.Claim, err)
	}
}

// TestOpenWindowInstance: the window hands over the claim's instance; a
// claim that does not know it (started before this version) takes the
// identity premigrate read from libvirt on the claim's host, never one
// given by a step elsewhere.
func TestOpenWindowInstance(t *testing.T) {
	for _, tc := range []struct {
		name      string
		claimed   int64 // the claim's Instance (-1: no claim)
		stepHost  string
		fromLibvt int64 // Who.Instance of the premigrate step
		want      int64
	}{
		{"the claim knows: kept", 1000, "src", 2000, 1000},
		{"the claim does not know: learnt on its host", 0, "src", 2000, 2000},
		{"the claim does not know, libvirt neither", 0, "src", 0, 0},
		{"the claim does not know: not from another host", 0, "elsewhere", 2000, 0},
		{"no claim: the source's", -1, "src", 2000, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := enginetest.NewFake()
			e := engine.New(f, engine.Options{})
			if tc.claimed >= 0 {
				if err := e.WriteClaim(ctx, who("src", 2, engine.SourceFrontend), engine.Claim{Seq: 2, Host: "src", Source: engine.SourceFrontend,
					State: engine.StateRunning, Instance: tc.claimed}); err != nil {
					t.Fatal(err)
				}
			}
			w := who(tc.stepHost, 3, engine.SourceFrontend)
			w.Instance = tc.fromLibvt
			res, err := e.OpenWindow(ctx, w, "src", "dst", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if res.Claim.Window.Instance != tc.want || res.Claim.Instance != tc.want {
				t.Fatalf("window instance %d, claim instance %d; want %d", res.Claim.Window.Instance, res.Claim.Instance, tc.want)
			}
		})
	}
}
