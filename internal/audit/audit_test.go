package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

func TestFromReportAppendRead(t *testing.T) {
	r := &engine.Report{Images: []engine.ImageReport{{Image: "one/a", Clients: []engine.ClientReport{
		{Address: "10.0.0.1:0/1", Client: "client.1", Cookie: "auto 1", Action: engine.ActUnlocked},
		{Address: "10.0.0.2:0/2", Action: engine.ActNone, Decision: engine.DecideAllowlisted},
		{Address: "10.0.0.3:0/3", Action: engine.ActFailed, Error: "blocklist failed: EACCES"},
	}}}, Recorded: []engine.ClientReport{{Address: "10.0.0.4:0/4", Action: engine.ActBlocklisted}}}
	recs := FromReport(r, Meta{Run: "r1", Op: "start", VM: VMOf(7), Host: "h"}, time.Unix(1000, 0))
	if len(recs) != 3 || recs[0].Result != "ok" || recs[1].Result != "error" || recs[2].Image != "" || *recs[0].VM != 7 {
		t.Fatalf("records: %+v", recs)
	}
	path := filepath.Join(t.TempDir(), "sub", "audit.log")
	if err := Append(path, recs); err != nil {
		t.Fatal(err)
	}
	// A torn last line (crash mid-write) is skipped and counted, not fatal.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"time":"2026-`)
	f.Close()
	got, bad, err := Read(path)
	if err != nil || bad != 1 || len(got) != 3 || got[2].Address != "10.0.0.4:0/4" {
		t.Fatalf("read back: %d records, %d bad, %v", len(got), bad, err)
	}
	st, _ := os.Stat(path)
	dst, _ := os.Stat(filepath.Dir(path))
	if st.Mode().Perm() != 0o640 || dst.Mode().Perm() != 0o750 {
		t.Fatalf("modes %o %o", st.Mode().Perm(), dst.Mode().Perm())
	}
	if recs, bad, err := Read(filepath.Join(t.TempDir(), "none")); err != nil || bad != 0 || recs != nil {
		t.Fatal("a missing log is empty")
	}
}

func TestNewRunID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewRunID()
		if len(id) != 12 || strings.Trim(id, "0123456789abcdef") != "" || seen[id] {
			t.Fatalf("run id %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
}
