package collision

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/events"
)

// TestPublishHost: a host without oned credentials (the normal case)
// spools its events for the front-end's collection and tries no oned call;
// only a host with a credentials file delivers itself (here: oned does not
// answer, so that one defers to the spool as Publish does).
func TestPublishHost(t *testing.T) {
	// An endpoint that refuses connections: any oned call fails fast.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String() + "/RPC2"
	l.Close()
	ev := events.Event{ID: "e1", VM: 7, Time: time.Unix(100, 0).UTC(), Action: "blocklisted"}
	for _, tc := range []struct {
		name       string
		creds      bool
		evs        []events.Event
		collection bool
		spooled    int
		deferred   bool
	}{
		{"no credentials: spooled for collection", false, []events.Event{ev}, true, 1, false},
		{"no credentials, nothing to publish", false, nil, true, 0, false},
		{"credentials: delivered directly (oned down: deferred)", true, []events.Event{ev}, false, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config.Default()
			cfg.SpoolDir = filepath.Join(dir, "spool")
			cfg.OpenNebula.Endpoint = endpoint
			cfg.OpenNebula.AuthFile = filepath.Join(dir, "one_auth")
			cfg.Timeouts.Oned = config.Duration(2 * time.Second)
			if tc.creds {
				if err := os.WriteFile(cfg.OpenNebula.AuthFile, []byte("oneadmin:x\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			res, err := PublishHost(context.Background(), cfg, tc.evs)
			var de *events.DeferredError
			if tc.deferred != errors.As(err, &de) || (!tc.deferred && err != nil) {
				t.Fatalf("err %v, deferred want %v", err, tc.deferred)
			}
			if res.ForCollection != tc.collection || res.Spooled != tc.spooled || res.Delivered != 0 {
				t.Fatalf("result %+v", res)
			}
			sp, err := events.OpenSpool(cfg.SpoolDir)
			if err != nil {
				t.Fatal(err)
			}
			if evs, err := sp.Pending(); err != nil || len(evs) != tc.spooled {
				t.Fatalf("spool holds %v %v, want %d", evs, err, tc.spooled)
			}
		})
	}
}
