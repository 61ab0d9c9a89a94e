package frontend

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Our VMM local actions, as they appear in a VM_MAD's -l list.
const (
	DeployAction  = "deploy-rbdfence"
	RestoreAction = "restore-rbdfence"
	MigrateAction = "migrate" + MigrateSuffix
	// AttachAction checks and fences a hot-attached disk before
	// OpenNebula's attach_disk reaches the host (internal/frontend/attach.go).
	AttachAction = "attach-rbdfence"
)

// VMMad is one VM_MAD block of oned.conf as far as rbdfence cares.
type VMMad struct {
	Name       string
	Executable string
	// Arguments is the ARGUMENTS value; ArgsLine its line (0-based), -1
	// when the block has none; argsStart/argsEnd the value's byte offsets
	// in that line.
	Arguments          string
	ArgsLine           int
	argsStart, argsEnd int
}

var (
	attrRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*([A-Za-z_]+)\s*=\s*"([^"]*)"`) })
	vmMadRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*VM_MAD\s*=\s*\[`) })
	quotedRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`"[^"]*"`) })
	argsLnRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\s*ARGUMENTS\s*=\s*")([^"]*)"`) })
)

// ParseVMMads returns the VM_MAD blocks of an oned.conf, in file order.
// Commented-out lines are skipped; each attribute is on its own line, as
// in OpenNebula's share/etc/oned.conf.
func ParseVMMads(conf []byte) []VMMad {
	var out []VMMad
	var cur *VMMad
	for i, line := range strings.Split(string(conf), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") {
			continue
		}
		if cur == nil {
			if vmMadRE().MatchString(line) {
				cur = &VMMad{ArgsLine: -1}
				line = line[strings.Index(line, "[")+1:]
			} else {
				continue
			}
		}
		if m := attrRE().FindStringSubmatch(line); m != nil {
			switch strings.ToUpper(m[1]) {
			case "NAME":
				cur.Name = m[2]
			case "EXECUTABLE":
				cur.Executable = m[2]
			case "ARGUMENTS":
				if a := argsLnRE().FindStringSubmatchIndex(line); a != nil {
					cur.Arguments, cur.ArgsLine, cur.argsStart, cur.argsEnd = m[2], i, a[4], a[5]
				}
			}
		}
		if strings.Contains(quotedRE().ReplaceAllString(line, ""), "]") {
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}

// RunsKVMDriver reports whether oned runs the VMM driver one_vmm_exec with
// the kvm remotes for m (any NAME: share/etc/oned.conf:488-498 of
// release-7.4.0 has NAME "qemu" with "-t 15 -r 0 kvm"). err is set when
// the driver would not start with these ARGUMENTS.
func (m VMMad) RunsKVMDriver() (bool, error) {
	if !strings.HasSuffix(m.Executable, "one_vmm_exec") {
		return false, nil
	}
	a, err := ParseDriverArgs(m.Arguments)
	if err != nil {
		return false, err
	}
	return a.Hypervisor == "kvm", nil
}

// DriverArgs is the VMM driver's command line as one_vmm_exec.rb reads it.
type DriverArgs struct {
	Hypervisor string
	// Local is the list of the LAST -l/--local option (each one replaces
	// the list: one_vmm_exec.rb:1555-1556), in order, nil without one.
	Local []LocalAction
	// localSpan is where that list is in the ARGUMENTS string.
	localStart, localEnd int
	hasLocal             bool
}

// LocalAction is one "action[=script]" item of a -l list.
type LocalAction struct {
	Action string // upper-cased, as OpenNebulaDriver.parse_actions_list keeps it
	Script string // "" when the item has no "="
	Text   string // the item as written
}

// Script returns the local script of action (upper or lower case) and
// whether the driver runs it locally.
func (d DriverArgs) Script(action string) (string, bool) {
	action = strings.ToUpper(action)
	found, script := false, ""
	for _, l := range d.Local {
		if l.Action == action {
			found, script = true, l.Script // the last item of a name wins (a Ruby hash)
		}
	}
	if found && script == "" {
		script = strings.ToLower(action)
	}
	return script, found
}

// driverOptions are one_vmm_exec.rb's GetoptLong options (:1529-1537 of
// release-7.4.0, :1496-1504 of release-6.10.5): 0 no argument,
// 1 required, 2 optional.
var driverOptions = []struct {
	long  string
	short byte
	arg   int
}{
	{"--retries", 'r', 2}, {"--threads", 't', 2}, {"--local", 'l', 1}, {"--delegate", 'd', 1},
	{"--shell", 's', 1}, {"--parallel", 'p', 0}, {"--timeout", 'w', 2},
}

// word is a blank-separated word of ARGUMENTS and its offset: oned passes
// ARGUMENTS as one string and the one_vmm_exec wrapper splits it with an
// unquoted $* (src/vmm_mad/exec/one_vmm_exec, include/Driver.h:285).
type word struct {
	s   string
	off int
}

func words(s string) []word {
	var out []word
	i := 0
	for _, f := range strings.Fields(s) {
		j := strings.Index(s[i:], f) + i
		out = append(out, word{f, j})
		i = j + len(f)
	}
	return out
}

// ParseDriverArgs reads a VM_MAD's ARGUMENTS as Ruby's GetoptLong does for
// one_vmm_exec.rb: options anywhere (PERMUTE), long options abbreviated to
// a unique prefix, "--opt=v" or "--opt v", short options clustered, "-lv"
// or "-l v", an optional argument taken from the next word unless it
// starts with '-', "--" ends the options. The error is what makes the
// driver exit at start (one_vmm_exec.rb:1567-1576).
func ParseDriverArgs(arguments string) (DriverArgs, error) {
	var d DriverArgs
	ws := words(arguments)
	var rest []string
	setLocal := func(long, val string, off int) {
		if long != "--local" {
			return
		}
		d.Local, d.hasLocal = parseActionsList(val), true
		d.localStart, d.localEnd = off, off+len(val)
	}
	for i := 0; i < len(ws); i++ {
		w := ws[i].s
		switch {
		case w == "--":
			for _, r := range ws[i+1:] {
				rest = append(rest, r.s)
			}
			i = len(ws)
		case strings.HasPrefix(w, "--"):
			name, val, hasVal := strings.Cut(w, "=")
			var match []int
			for j, o := range driverOptions {
				if o.long == name {
					match = []int{j}
					break
				}
				if strings.HasPrefix(o.long, name) {
					match = append(match, j)
				}
			}
			if len(match) != 1 {
				return d, fmt.Errorf("option %s is unknown or ambiguous", clip(name))
			}
			o := driverOptions[match[0]]
			off := ws[i].off + len(name) + 1
			switch {
			case o.arg == 0 && hasVal:
				return d, fmt.Errorf("option %s takes no argument", o.long)
			case hasVal:
			case o.arg == 1 && i+1 >= len(ws):
				return d, fmt.Errorf("option %s requires an argument", o.long)
			case o.arg == 1, o.arg == 2 && i+1 < len(ws) && !strings.HasPrefix(ws[i+1].s, "-"):
				i++
				val, off = ws[i].s, ws[i].off
			}
			setLocal(o.long, val, off)
		case strings.HasPrefix(w, "-") && len(w) > 1:
			for k := 1; k < len(w); k++ {
				idx := -1
				for j, o := range driverOptions {
					if o.short == w[k] {
						idx = j
					}
				}
				if idx < 0 {
					return d, fmt.Errorf("option -%c is unknown", w[k])
				}
				o := driverOptions[idx]
				if o.arg == 0 {
					continue
				}
				val, off := w[k+1:], ws[i].off+k+1
				if val == "" {
					switch {
					case o.arg == 1 && i+1 >= len(ws):
						return d, fmt.Errorf("option -%c requires an argument", o.short)
					case o.arg == 1, i+1 < len(ws) && !strings.HasPrefix(ws[i+1].s, "-"):
						i++
						val, off = ws[i].s, ws[i].off
					}
				}
				setLocal(o.long, val, off)
				break
			}
		default:
			rest = append(rest, w)
		}
	}
	if len(rest) == 0 {
		return d, fmt.Errorf("no hypervisor name")
	}
	d.Hypervisor = rest[0]
	return d, nil
}

// parseActionsList splits a -l list as OpenNebulaDriver.parse_actions_list
// does (src/mad/ruby/OpenNebulaDriver.rb:162-183 of release-7.4.0).
func parseActionsList(s string) []LocalAction {
	var out []LocalAction
	for _, item := range strings.Split(s, ",") {
		t := strings.TrimSpace(item)
		if t == "" {
			continue
		}
		name, script, _ := strings.Cut(t, "=")
		out = append(out, LocalAction{Action: strings.ToUpper(strings.TrimSpace(name)), Script: strings.TrimSpace(script), Text: item})
	}
	return out
}

// ConfPlan is the oned.conf change that makes every VM_MAD that runs the
// kvm driver run rbdfence's local actions.
type ConfPlan struct {
	New []byte
	// Changed are the VM_MAD names whose ARGUMENTS change; Covered those
	// that already run our actions.
	Changed, Covered []string
	// Wrapped are the admin's local migrate scripts that the migrate
	// action wraps: each needs the action installed as <script>-rbdfence.
	Wrapped []string
	// Problems are the VM_MADs that run (or may run) the kvm driver and
	// cannot be covered, each with the reason.
	Problems []string
}

// PlanOnedConf plans the change. Only the list of the last -l option of
// each kvm VM_MAD is edited (the driver ignores earlier ones), in place
// and in the form it is written in (-l, -lLIST, --local=, --loc); without
// any -l, " -l <ours>" is appended. Everything else stays byte for byte.
func PlanOnedConf(conf []byte) ConfPlan {
	var p ConfPlan
	lines := strings.Split(string(conf), "\n")
	for _, m := range ParseVMMads(conf) {
		name := fmt.Sprintf("VM_MAD %q", m.Name)
		kvm, err := m.RunsKVMDriver()
		switch {
		case err != nil:
			p.Problems = append(p.Problems, fmt.Sprintf("%s: its ARGUMENTS %q would not start the driver (%v): not covered", name, m.Arguments, err))
			continue
		case !kvm && strings.HasSuffix(m.Executable, "one_vmm_exec"):
			continue
		case !kvm:
			if d, err := ParseDriverArgs(m.Arguments); err == nil && d.Hypervisor == "kvm" {
				p.Problems = append(p.Problems, fmt.Sprintf("%s: runs EXECUTABLE %q, not one_vmm_exec: not covered", name, m.Executable))
			}
			continue
		case m.ArgsLine < 0:
			p.Problems = append(p.Problems, fmt.Sprintf("%s: no ARGUMENTS line this installer can edit: not covered", name))
			continue
		}
		newArgs, wrapped, err := addOurActions(m.Arguments)
		if err != nil {
			p.Problems = append(p.Problems, fmt.Sprintf("%s: %v: not covered", name, err))
			continue
		}
		p.Wrapped = appendUnique(p.Wrapped, wrapped...)
		if newArgs == m.Arguments {
			p.Covered = append(p.Covered, m.Name)
			continue
		}
		l := lines[m.ArgsLine]
		lines[m.ArgsLine] = l[:m.argsStart] + newArgs + l[m.argsEnd:]
		p.Changed = append(p.Changed, m.Name)
	}
	p.New = []byte(strings.Join(lines, "\n"))
	return p
}

func appendUnique(list []string, add ...string) []string {
	for _, a := range add {
		found := false
		for _, l := range list {
			found = found || l == a
		}
		if !found {
			list = append(list, a)
		}
	}
	return list
}

// addOurActions returns ARGUMENTS with deploy, restore and migrate run by
// rbdfence's local actions, and the admin's local migrate script it wraps.
func addOurActions(args string) (string, []string, error) {
	d, err := ParseDriverArgs(args)
	if err != nil {
		return "", nil, err
	}
	if !d.hasLocal {
		return strings.TrimRight(args, " \t") + " -l deploy=" + DeployAction + ",restore=" + RestoreAction + ",migrate=" + MigrateAction + ",attach_disk=" + AttachAction, nil, nil
	}
	items := d.Local
	var out []string
	var wrapped []string
	have := map[string]bool{}
	for _, it := range items {
		text := strings.TrimSpace(it.Text)
		switch it.Action {
		case "DEPLOY", "RESTORE", "ATTACH_DISK":
			want := map[string]string{"DEPLOY": DeployAction, "RESTORE": RestoreAction, "ATTACH_DISK": AttachAction}[it.Action]
			if it.Script != want {
				return "", nil, fmt.Errorf("it already has a local %s action (%s) that rbdfence would replace", strings.ToLower(it.Action), text)
			}
		case "MIGRATE":
			switch {
			case strings.HasSuffix(it.Script, MigrateSuffix):
				if it.Script != MigrateAction {
					wrapped = append(wrapped, strings.TrimSuffix(it.Script, MigrateSuffix))
				}
			case it.Script == "" || it.Script == "migrate":
				return "", nil, fmt.Errorf("it runs the migrate script itself on the front-end (%s); rbdfence wraps only named local migrate scripts such as migrate_local", text)
			default:
				if !safeScript(it.Script) {
					return "", nil, fmt.Errorf("its local migrate script %q is not a plain file name", it.Script)
				}
				wrapped = append(wrapped, it.Script)
				text = strings.SplitN(text, "=", 2)[0] + "=" + it.Script + MigrateSuffix
			}
		}
		have[it.Action] = true
		out = append(out, text)
	}
	for _, a := range []struct{ name, item string }{{"DEPLOY", "deploy=" + DeployAction}, {"RESTORE", "restore=" + RestoreAction}, {"MIGRATE", "migrate=" + MigrateAction}, {"ATTACH_DISK", "attach_disk=" + AttachAction}} {
		if !have[a.name] {
			out = append(out, a.item)
		}
	}
	list := strings.Join(out, ",")
	if list == args[d.localStart:d.localEnd] {
		return args, wrapped, nil
	}
	return args[:d.localStart] + list + args[d.localEnd:], wrapped, nil
}

var scriptRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`) })

func safeScript(s string) bool { return scriptRE().MatchString(s) && s != "." && s != ".." }

// RemoveOurActions is the reverse of PlanOnedConf for an oned.conf edited
// since the install: our items leave the last -l list of every kvm
// VM_MAD (a wrapped migrate script gets its own name back); a -l that
// holds only ours goes with its leading blank.
func RemoveOurActions(conf []byte) []byte {
	lines := strings.Split(string(conf), "\n")
	for _, m := range ParseVMMads(conf) {
		if kvm, err := m.RunsKVMDriver(); err != nil || !kvm || m.ArgsLine < 0 {
			continue
		}
		d, _ := ParseDriverArgs(m.Arguments)
		if !d.hasLocal {
			continue
		}
		var keep []string
		for _, it := range d.Local {
			text := strings.TrimSpace(it.Text)
			switch {
			case it.Action == "DEPLOY" && it.Script == DeployAction, it.Action == "RESTORE" && it.Script == RestoreAction,
				it.Action == "MIGRATE" && it.Script == MigrateAction, it.Action == "ATTACH_DISK" && it.Script == AttachAction:
				continue
			case it.Action == "MIGRATE" && strings.HasSuffix(it.Script, MigrateSuffix):
				text = strings.TrimSuffix(text, MigrateSuffix)
			}
			keep = append(keep, text)
		}
		a := m.Arguments
		var na string
		if len(keep) == 0 && strings.HasSuffix(a[:d.localStart], "-l ") {
			na = strings.TrimRight(a[:d.localStart-len("-l ")], " \t") + a[d.localEnd:]
		} else {
			na = a[:d.localStart] + strings.Join(keep, ",") + a[d.localEnd:]
		}
		l := lines[m.ArgsLine]
		lines[m.ArgsLine] = l[:m.argsStart] + na + l[m.argsEnd:]
	}
	return []byte(strings.Join(lines, "\n"))
}

// MigrateScripts returns the local migrate actions that the VM_MADs
// running the kvm driver name (migrate-rbdfence, migrate_local-rbdfence,
// ...), as the driver reads their ARGUMENTS, each once.
func MigrateScripts(conf []byte) []string {
	var out []string
	for _, m := range ParseVMMads(conf) {
		if kvm, err := m.RunsKVMDriver(); err != nil || !kvm {
			continue
		}
		d, _ := ParseDriverArgs(m.Arguments)
		if s, ok := d.Script("migrate"); ok {
			out = appendUnique(out, s)
		}
	}
	return out
}

// CoverageReport says, for doctor, which VM_MADs run the kvm driver and
// whether each runs rbdfence's four local actions as the driver reads
// ARGUMENTS. ok is false when one is not covered or none runs kvm.
func CoverageReport(conf []byte) (ok bool, detail string) {
	var good, bad []string
	for _, m := range ParseVMMads(conf) {
		kvm, err := m.RunsKVMDriver()
		if err != nil {
			bad = append(bad, fmt.Sprintf("%q (ARGUMENTS do not parse: %v)", m.Name, err))
			continue
		}
		if !kvm {
			continue
		}
		d, _ := ParseDriverArgs(m.Arguments)
		var missing []string
		dep, _ := d.Script("deploy")
		res, _ := d.Script("restore")
		mig, _ := d.Script("migrate")
		att, _ := d.Script("attach_disk")
		if dep != DeployAction {
			missing = append(missing, "deploy")
		}
		if res != RestoreAction {
			missing = append(missing, "restore")
		}
		if !strings.HasSuffix(mig, MigrateSuffix) {
			missing = append(missing, "migrate")
		}
		if att != AttachAction {
			missing = append(missing, "attach_disk")
		}
		if len(missing) > 0 {
			bad = append(bad, fmt.Sprintf("%q (no rbdfence %s, as the driver reads its last -l)", m.Name, strings.Join(missing, ", ")))
			continue
		}
		good = append(good, fmt.Sprintf("%q", m.Name))
	}
	switch {
	case len(bad) > 0:
		return false, "VM_MAD(s) running the kvm driver without rbdfence: " + strings.Join(bad, "; ")
	case len(good) == 0:
		return false, "no VM_MAD runs the kvm driver (EXECUTABLE one_vmm_exec, hypervisor kvm)"
	}
	return true, "every VM_MAD running the kvm driver runs the rbdfence local actions: " + strings.Join(good, ", ")
}
