package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "premigrate")
	for _, tc := range []struct {
		name, config, orig string
		args               []string
		code               int
		says               string
	}{
		// Bad arguments abort the migration; the original still ran.
		{"no args", "", "#!/bin/sh\necho ran >&2\nexit 0\n", nil, 2, "usage: premigrate"},
		{"original missing", "", "", []string{"a", "a", "/d", "1", "0"}, 1, "is missing"},
		{"original's code", "", "#!/bin/sh\nexit 6\n", []string{"a", "a", "/d", "1", "0"}, 6, ""},
		{"broken config", filepath.Join(dir, "missing.yaml"), "#!/bin/sh\nexit 0\n", []string{"a", "b", "/d", "1", "0"}, 2, "missing.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(self + ".rbdfence-orig")
			if tc.orig != "" {
				if err := os.WriteFile(self+".rbdfence-orig", []byte(tc.orig), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cfg := tc.config
			if cfg == "" {
				cfg = filepath.Join(dir, "ok.yaml")
				if err := os.WriteFile(cfg, []byte("spool_dir: "+dir+"/spool\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("RBDFENCE_CONFIG", cfg)
			var out, errb bytes.Buffer
			code := run(t.Context(), self, tc.args, strings.NewReader(""), &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.says) {
				t.Fatalf("exit %d stderr %q; want %d saying %q", code, errb.String(), tc.code, tc.says)
			}
		})
	}
}
