package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestVerbHelp: every verb and sub-verb answers --help and -h on stdout
// with exit 0: its own synopsis (from helps, so none is missing) and its
// flags with two dashes, no -1 "default" of an ID flag.
func TestVerbHelp(t *testing.T) {
	for _, h := range helps {
		for _, flag := range []string{"--help", "-h"} {
			args := append(strings.Fields(h.name), flag)
			code, out, errOut := runCLI(args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: rbdfence "+h.synopsis+"\n") {
				t.Errorf("rbdfence %s: exit %d, stderr %q, stdout:\n%s", strings.Join(args, " "), code, errOut, out)
			}
			if strings.Contains(out, "-1") || strings.Contains(out, "[=true|false]") {
				t.Errorf("rbdfence %s shows a sentinel or flag noise:\n%s", strings.Join(args, " "), out)
			}
			// Every flag its synopsis names is one of its flags.
			for _, w := range strings.FieldsFunc(h.synopsis, func(r rune) bool { return strings.ContainsRune(" []|", r) }) {
				if strings.HasPrefix(w, "--") && !strings.Contains(out, "  "+w+" ") && !strings.Contains(out, ", "+w+" ") && !strings.Contains(out, "  "+w+"\n") {
					t.Errorf("rbdfence %s: the synopsis names %s, the flags do not:\n%s", h.name, w, out)
				}
			}
		}
		if code, out, _ := runCLI("help", h.name); h.name != "events" && !strings.Contains(h.name, " ") && (code != 0 || !strings.Contains(out, h.synopsis)) {
			t.Errorf("rbdfence help %s: exit %d\n%s", h.name, code, out)
		}
	}
	for verb := range verbs {
		if findHelp(verb) == nil && len(subVerbs(verb)) == 0 {
			t.Errorf("verb %s has no help", verb)
		}
	}
	for _, group := range []string{"claim", "blocklist", "spool"} {
		code, out, _ := runCLI(group, "--help")
		if code != 0 || !strings.Contains(out, "usage: rbdfence "+group+" ") {
			t.Errorf("rbdfence %s --help: exit %d\n%s", group, code, out)
		}
		for _, sub := range subVerbs(group) {
			if !strings.Contains(out, group+" "+sub) {
				t.Errorf("rbdfence %s --help does not list %s:\n%s", group, sub, out)
			}
		}
	}
	code, out, _ := runCLI("help")
	if code != 0 || !strings.Contains(out, "-j, --json") || !strings.Contains(out, "exit codes:") || strings.Contains(out, "-1") {
		t.Errorf("rbdfence help: exit %d\n%s", code, out)
	}
}

// TestFlagHabits: common flags before the verb, -j, and flag errors that
// name the flag with its dashes, one line, exit 2.
func TestFlagHabits(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("fence:\n  expire: soon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		// The config is read (and refused, naming the key) wherever --config stands.
		{[]string{"--config", bad, "check", "--image", "one/x"}, 2, "fence.expire"},
		{[]string{"--config=" + bad, "-j", "check", "--image", "one/x"}, 2, "fence.expire"},
		{[]string{"-v", "check", "--config", bad, "-j", "--image", "one/x"}, 2, "fence.expire"},
		{[]string{"check", "--image", "one/x", "--config", bad}, 2, "fence.expire"},
		{[]string{"--config", bad, "claim", "show", "--vm", "1"}, 2, "fence.expire"},
		{[]string{"--pool", "one", "claim", "show"}, 2, "--pool before the verb: not a common flag"},
		{[]string{"--config"}, 2, "--config needs a value"},
		{[]string{"check", "--bogus"}, 2, "check: unknown flag: --bogus (try: rbdfence check --help)"},
		{[]string{"check", "-vm", "1"}, 2, "-vm: long flags take two dashes: --vm"},
		{[]string{"check", "--vm", "abc"}, 2, `--vm "abc": want a whole number`},
		{[]string{"check", "--image"}, 2, "flag needs an argument: --image"},
		{[]string{"fence-host", "--quiet", "soon"}, 2, `--quiet "soon": want a duration`},
		{[]string{"check", "stray"}, 2, `unexpected argument "stray"`},
		{[]string{"frobnicate"}, 2, `unknown verb "frobnicate" (verbs: blocklist, check,`},
		{[]string{"help", "frobnicate"}, 2, `help: unknown verb "frobnicate"`},
		{[]string{"version", "--json"}, 2, "unknown flag: --json"},
	} {
		code, out, errOut := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || out != "" {
			t.Errorf("rbdfence %s: exit %d (want %d), stderr %q (want one line with %q), stdout %q", strings.Join(tc.args, " "), code, tc.code, errOut, tc.want, out)
		}
		if strings.Contains(errOut, " -"+"vm ") || strings.Contains(errOut, "flag provided") {
			t.Errorf("rbdfence %s: a single-dash flag name in %q", strings.Join(tc.args, " "), errOut)
		}
	}
	if code, out, _ := runCLI("--version"); code != 0 || !strings.HasPrefix(out, "rbdfence ") {
		t.Errorf("--version: exit %d %q", code, out)
	}
}

func TestSplitGlobals(t *testing.T) {
	g, rest, err := splitGlobals([]string{"--config", "F", "-j", "--mon-host=1.2.3.4", "claim", "show", "--vm", "1"})
	if err != nil || strings.Join(g, " ") != "--config F -j --mon-host=1.2.3.4" || strings.Join(rest, " ") != "claim show --vm 1" {
		t.Fatalf("%q %q %v", g, rest, err)
	}
	if got := withGlobals([]string{"show", "--vm", "1", "--", "x"}, g); strings.Join(got, " ") != "show --vm 1 --config F -j --mon-host=1.2.3.4 -- x" {
		t.Fatalf("withGlobals: %q", got)
	}
}

func TestDeployName(t *testing.T) {
	if deploy(3) != "deploy #3" || strings.Contains(deploy(-1), "-1") {
		t.Fatalf("%q %q", deploy(3), deploy(-1))
	}
}

// TestVerbsDocumented: docs/CLI.md prints the verb table of the help.
func TestVerbsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), verbsMarkdown()) {
		t.Fatalf("docs/CLI.md does not print the verbs as rbdfence help says them:\n%s", verbsMarkdown())
	}
}
