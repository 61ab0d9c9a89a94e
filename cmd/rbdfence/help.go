package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// verbHelp is the help of one verb or sub-verb; name is its FlagSet's name.
type verbHelp struct {
	name     string
	synopsis string // after "rbdfence "
	about    string // one line for the verb list, then more for VERB --help
}

// helps is every verb's help, in the order "rbdfence help" lists them.
var helps = []verbHelp{
	{"check", "check --image POOL/IMAGE [--image ...] | --vm ID | --all [--json]",
		"dry run: every client of the images (or of a VM's disks, from oned) and what fence would do\n" +
			"Changes nothing. A running VM's recorded instance is kept (decision \"instance\"); a stopped VM\n" +
			"is checked as a start on its last host. Exit 5 when a client would be fenced."},
	{"fence", "fence --image POOL/IMAGE [--image ...] [--json]",
		"blocklist and unlock every foreign client of the images\n" +
			"Each client's exact address ip:port/nonce is blocklisted for fence.expire, then its lock broken;\n" +
			"every fence is written to the audit log. A VM is fenced by its start, not by this verb."},
	{"events", "events [--vm ID] [--since T] [--json]",
		"lock-collision events of every VM, from oned's user templates\n" +
			"See also: rbdfence events flush --help."},
	{"events flush", "events flush [--host NAME] [--no-hosts] [--host-timeout D] [--json]",
		"deliver the spooled events to oned: this machine's, then every KVM host's, over ssh\n" +
			"Runs on the front-end (rbdfence-events.timer runs it every minute). Exit non-zero when a host\n" +
			"could not be collected: its events stay in its spool for the next run."},
	{"blocklist ls", "blocklist ls [--all] [--json]",
		"the blocklist entries rbdfence added: address, VM, image, host, expiry, time left"},
	{"unfence", "unfence ADDRESS | --vm ID | --host NAME [--yes]",
		"remove blocklist entries rbdfence added (needs the blocklistop=rm cap)\n" +
			"Asks before removing unless --yes; audited, and raises an event on the VM."},
	{"fence-host", "fence-host [--host NAME|ID] [--whole-address] [--host-addr IP] [--quiet 2m]",
		"OpenNebula HA hook fence: blocklist every Ceph client of the VMs on a failed host\n" +
			"Refuses (exit 4) a host that is not ERROR/OFFLINE or that oned heard from within --quiet.\n" +
			"Without --host it reads the host's XML, base64, on stdin (OpenNebula's ft/fence_host.sh contract)."},
	{"claim show", "claim show --vm ID [--pool POOL]", "a VM's claim record (JSON)"},
	{"claim reset", "claim reset --vm ID [--pool POOL]",
		"empty a VM's claim (audited, raises an event; refused while a run holds its lease)\n" +
			"The next start claims the VM afresh; check first: rbdfence check --vm ID."},
	{"claim gc", "claim gc [--apply] [--pool POOL]",
		"the claims of VMs oned reports DONE or does not know; --apply resets them (audited)"},
	{"doctor", "doctor [--role auto|host|frontend|all] [--root DIR] [--json]",
		"check the installation: config, Ceph access and caps, hook, local actions, VM_MAD, oned"},
	{"host", "host [--framed] [--detached]",
		"host-side step of the front-end drivers: one JSON request on stdin, one JSON answer on stdout"},
	{"spool list", "spool list", "host side of the front-end's event collection: this host's pending events (JSON)"},
	{"spool ack", "spool ack", "host side of the front-end's event collection: remove the events whose ids are on stdin"},
	{"version", "version", "print the version"},
}

func findHelp(name string) *verbHelp {
	for i := range helps {
		if helps[i].name == name {
			return &helps[i]
		}
	}
	return nil
}

// globalFlags are the flags every Ceph-facing verb takes, also before the
// verb (common.register defines the same for the verb's own FlagSet).
func globalFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("rbdfence", flag.ContinueOnError)
	var c common
	c.register(fs)
	return fs
}

// usage is "rbdfence help": the verbs, the common flags, the exit codes.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: rbdfence [common flags] VERB [flags]\n\nverbs:\n")
	for _, h := range helps {
		first, _, _ := strings.Cut(h.about, "\n")
		fmt.Fprintf(&b, "  %s\n        %s\n", h.synopsis, first)
	}
	b.WriteString("\ncommon flags (before or after the verb):\n")
	b.WriteString(flagUsages(globalFlags()))
	b.WriteString("\nrbdfence VERB --help shows a verb's flags.\n\nexit codes:\n")
	b.WriteString(outcome.Text())
	return b.String()
}

// verbUsage is "rbdfence VERB --help", from the verb's FlagSet.
func verbUsage(fs *flag.FlagSet) string {
	var b strings.Builder
	h := findHelp(fs.Name())
	if h == nil {
		h = &verbHelp{name: fs.Name(), synopsis: fs.Name() + " [flags]"}
	}
	fmt.Fprintf(&b, "usage: rbdfence %s\n\n", h.synopsis)
	if h.about != "" {
		b.WriteString(h.about + "\n\n")
	}
	own, common := flag.NewFlagSet("", flag.ContinueOnError), flag.NewFlagSet("", flag.ContinueOnError)
	globals := globalFlags()
	fs.VisitAll(func(f *flag.Flag) {
		if globals.Lookup(f.Name) != nil {
			common.AddFlag(f)
		} else {
			own.AddFlag(f)
		}
	})
	if u := flagUsages(own); u != "" {
		b.WriteString("flags:\n" + u)
	}
	if u := flagUsages(common); u != "" {
		b.WriteString("\ncommon flags (also before the verb):\n" + u)
	}
	fmt.Fprintf(&b, "\nconfig: --config FILE, else $RBDFENCE_CONFIG, else %s. Exit codes: rbdfence help.\n", config.DefaultPath)
	return b.String()
}

// groupHelp is "rbdfence claim --help": the sub-verbs.
func groupHelp(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: rbdfence %s %s [flags]\n\n", name, strings.Join(subVerbs(name), "|"))
	tw := newTable(&b)
	for _, h := range helps {
		if strings.HasPrefix(h.name, name+" ") {
			first, _, _ := strings.Cut(h.about, "\n")
			fmt.Fprintf(tw, "  %s\t%s\n", h.synopsis, first)
		}
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nrbdfence %s SUBVERB --help shows its flags.\n", name)
	return b.String()
}

// flagUsages lists fs's flags, one a line: -j, --json; --vm ID (the
// placeholder from `backquotes` in the usage); the default when it is one
// (an ID flag's -1 means "not given").
func flagUsages(fs *flag.FlagSet) string {
	var b strings.Builder
	tw := newTable(&b)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Hidden {
			return
		}
		name := "    --" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", --" + f.Name
		}
		varname, text := flag.UnquoteUsage(f)
		switch f.Value.Type() {
		case "bool":
			varname = ""
		case varname:
			varname = map[string]string{"int": "N", "duration": "DURATION"}[varname]
			if varname == "" {
				varname = "VALUE"
			}
		}
		if varname != "" {
			name += " " + varname
		}
		switch d := f.DefValue; d {
		case "", "false", "0", "-1", "[]":
		default:
			if f.Value.Type() == "duration" {
				d = strings.TrimSuffix(strings.TrimSuffix(d, "0s"), "0m")
			}
			text += " (default " + d + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, text)
	})
	tw.Flush()
	return b.String()
}

// verbsMarkdown is the verb table of docs/CLI.md (a test keeps it equal).
func verbsMarkdown() string {
	var b strings.Builder
	b.WriteString("| command | what it does |\n|---|---|\n")
	for _, h := range helps {
		first, _, _ := strings.Cut(h.about, "\n")
		fmt.Fprintf(&b, "| `rbdfence %s` | %s |\n", strings.ReplaceAll(h.synopsis, "|", "\\|"), first)
	}
	return b.String()
}

// subVerbs are the sub-verbs of verb (claim: show, reset, gc).
func subVerbs(verb string) []string {
	var out []string
	for _, h := range helps {
		if v, sub, ok := strings.Cut(h.name, " "); ok && v == verb {
			out = append(out, sub)
		}
	}
	return out
}

func verbNames() []string {
	out := make([]string, 0, len(verbs))
	for v := range verbs {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func isHelpArg(s string) bool { return s == "-h" || s == "--help" }

// help is "rbdfence help [VERB [SUBVERB]]".
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage())
		return 0
	}
	if _, ok := verbs[args[0]]; !ok {
		return exitCode(usagef("help: unknown verb %q (verbs: %s)", args[0], strings.Join(verbNames(), ", ")), stderr)
	}
	if len(args) == 1 && len(subVerbs(args[0])) > 0 && args[0] != "events" {
		fmt.Fprint(stdout, groupHelp(args[0]))
		return 0
	}
	return run(context.Background(), append(slices.Clone(args), "--help"), strings.NewReader(""), stdout, stderr)
}
