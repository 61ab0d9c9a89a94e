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
	good := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(good, []byte("spool_dir: "+dir+"/spool\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, config, stdin string
		args                []string
		code                int
		says                string
	}{
		{"no args", good, "", nil, 2, "usage: deploy-rbdfence"},
		{"bad config", filepath.Join(dir, "missing.yaml"), "", []string{"/d/deployment.0", "h", "1", "h"}, 2, "missing.yaml"},
		{"bad stdin", good, "%%%", []string{"/d/deployment.0", "h", "1", "h"}, 2, "not base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("RBDFENCE_CONFIG", tc.config)
			var out, errb bytes.Buffer
			code := run(t.Context(), tc.args, strings.NewReader(tc.stdin), &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.says) || strings.Count(errb.String(), "\n") != 1 || out.Len() != 0 {
				t.Fatalf("exit %d stdout %q stderr %q; want %d and one line saying %q", code, out.String(), errb.String(), tc.code, tc.says)
			}
		})
	}
}
