// Command onedconf-rbdfence is the installer's and the admin's reader of
// oned.conf VM_MAD blocks, reading ARGUMENTS as OpenNebula's VMM driver
// does (the last -l wins, GetoptLong abbreviations; every VM_MAD that runs
// the kvm driver, whatever its NAME).
//
//	onedconf-rbdfence plan   <oned.conf>   the file with every kvm VM_MAD running rbdfence's local actions, on stdout
//	onedconf-rbdfence remove <oned.conf>   the file without them, on stdout
//	onedconf-rbdfence check  <oned.conf>   whether every kvm VM_MAD runs them
//
// plan reports on stderr, one line each: "change: <NAME>", "-<old line>",
// "+<new line>", "covered: <NAME>", "wrap: <local migrate script>",
// "problem: <VM_MAD and why it is not covered>".
//
// Exit codes: 0 done (check: covered); 1 check: not covered; 2 bad
// arguments or unreadable file; 3 plan: some VM_MAD that runs the kvm
// driver cannot be covered (the plan for the others is still printed).
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rbdfence/rbdfence/internal/frontend"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "usage: onedconf-rbdfence plan|remove|check <oned.conf>")
		return 2
	}
	conf, err := os.ReadFile(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "onedconf-rbdfence: %v\n", err)
		return 2
	}
	switch args[0] {
	case "plan":
		p := frontend.PlanOnedConf(conf)
		old, cur := strings.Split(string(conf), "\n"), strings.Split(string(p.New), "\n")
		for _, n := range p.Changed {
			fmt.Fprintf(stderr, "change: %s\n", n)
		}
		for i := range old {
			if i < len(cur) && old[i] != cur[i] {
				fmt.Fprintf(stderr, "-%s\n+%s\n", old[i], cur[i])
			}
		}
		for _, n := range p.Covered {
			fmt.Fprintf(stderr, "covered: %s\n", n)
		}
		for _, w := range p.Wrapped {
			fmt.Fprintf(stderr, "wrap: %s\n", w)
		}
		for _, pr := range p.Problems {
			fmt.Fprintf(stderr, "problem: %s\n", pr)
		}
		_, _ = stdout.Write(p.New)
		if len(p.Problems) > 0 {
			return 3
		}
		return 0
	case "remove":
		_, _ = stdout.Write(frontend.RemoveOurActions(conf))
		return 0
	case "check":
		ok, detail := frontend.CoverageReport(conf)
		fmt.Fprintln(stdout, detail)
		if !ok {
			return 1
		}
		return 0
	}
	fmt.Fprintln(stderr, "usage: onedconf-rbdfence plan|remove|check <oned.conf>")
	return 2
}
