package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/hostspool"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// TestSpoolVerb: the host side of the collection, run as the front-end
// runs it over ssh: one JSON answer on stdout always, a clear exit code.
func TestSpoolVerb(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rbdfence.yaml")
	if err := os.WriteFile(cfg, []byte("spool_dir: "+dir+"/spool\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sp, err := events.OpenSpool(filepath.Join(dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := sp.Put(events.Event{ID: id, VM: 1, Time: time.Unix(100, 0).UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		args   []string
		stdin  string
		code   int
		answer string // on stdout
		left   int    // events still spooled afterwards
	}{
		{"no op", nil, "", 2, "", 2},
		{"unknown op", []string{"drop"}, "", 2, "", 2},
		{"list", []string{"list", "--config", cfg}, "", 0, `"ok":true`, 2},
		{"ack a path", []string{"ack", "--config", cfg}, `{"ids":["../spool/a"]}`, 2, `"error":"spool ack request: event id`, 2},
		{"ack garbage", []string{"ack", "--config", cfg}, `{`, 2, `not valid JSON`, 2},
		{"ack", []string{"ack", "--config", cfg}, `{"version":1,"ids":["a","zz"]}`, 0, `"removed":1,"missing":["zz"]`, 1},
		{"bad flag", []string{"list", "--nope"}, "", 2, `"ok":false`, 1},
		{"missing config", []string{"list", "--config", filepath.Join(dir, "absent.yaml")}, "", 2, `"ok":false`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := runSpool(t.Context(), tc.args, strings.NewReader(tc.stdin), &out)
			code := exitCode(err, &errb)
			if code != tc.code || !strings.Contains(out.String(), tc.answer) {
				t.Fatalf("exit %d (want %d), stdout %q (want %q), stderr %q", code, tc.code, out.String(), tc.answer, errb.String())
			}
			if code != 0 && strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
				t.Fatalf("stderr is not one line: %q", errb.String())
			}
			if tc.answer != "" && strings.Contains(tc.args[0], "list") && code == 0 {
				if _, err := hostspool.ReadList(&out); err != nil {
					t.Fatalf("the front-end cannot read the answer: %v", err)
				}
			}
			evs, _ := sp.Pending()
			if len(evs) != tc.left {
				t.Fatalf("%d events left, want %d", len(evs), tc.left)
			}
		})
	}
	// A host that never spooled an event: list and ack answer, and create
	// nothing (a read-only command makes no spool directory).
	none := filepath.Join(dir, "never", "spool")
	noneCfg := filepath.Join(dir, "never.yaml")
	if err := os.WriteFile(noneCfg, []byte("spool_dir: "+none+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ op, stdin, answer string }{
		{"list", "", `"ok":true,"spool":"` + none + `","events":[]`},
		{"ack", `{"version":1,"ids":["a"],"gone":["b"]}`, `"ok":true,"removed":0,"missing":["a","b"]`},
	} {
		var out, errb bytes.Buffer
		err := runSpool(t.Context(), []string{tc.op, "--config", noneCfg}, strings.NewReader(tc.stdin), &out)
		if code := exitCode(err, &errb); code != 0 || !strings.Contains(out.String(), tc.answer) {
			t.Fatalf("spool %s without a spool: exit %d, stdout %q (want %q), stderr %q", tc.op, code, out.String(), tc.answer, errb.String())
		}
		if _, err := os.Lstat(filepath.Join(dir, "never")); !os.IsNotExist(err) {
			t.Fatalf("spool %s without a spool created %s (%v)", tc.op, filepath.Join(dir, "never"), err)
		}
	}
	if outcome.Usage.Code() != 2 {
		t.Fatal("usage exit code is not 2")
	}
}

// TestEventsFlushBadFlags: bad input is a usage error before anything runs.
func TestEventsFlushBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--no-hosts", "--host", "n1"},
		{"--host-timeout", "soon"},
		{"--host-timeout", "-5s"},
		{"--host", ""},
	} {
		var out, errb bytes.Buffer
		err := runEvents(t.Context(), append([]string{"flush"}, args...), &out, &errb)
		if code := exitCode(err, &errb); code != 2 || strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
			t.Errorf("events flush %v: exit %d, stderr %q; want a one-line usage error", args, code, errb.String())
		}
	}
}
