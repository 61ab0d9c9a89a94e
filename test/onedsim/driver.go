package onedsim

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// What OpenNebula's VMM driver (src/vmm_mad/exec/one_vmm_exec.rb, run by
// oned for every VM_MAD with EXECUTABLE "one_vmm_exec") does around the
// scripts rbdfence installs, as read in tags release-7.4.0 and
// release-6.10.5. Tests use these to produce what the real driver produces,
// independently of rbdfence's own code.

// WriteLocalDeployFiles writes vm.xml and ds.xml into vmDir (the directory
// of the LOCAL deployment file) as the driver does when deploy is a local
// action: the deploy steps "/bin/mkdir -p", "/bin/cat - >vm_dir/vm.xml" and
// "/bin/cat - >vm_dir/ds.xml" run with :is_local (one_vmm_exec.rb:443-464
// of 7.4.0, :458-481 of 6.10.5), and do_action hands a local command its
// stdin as Base64.strict_encode64 (src/mad/ruby/OpenNebulaDriver.rb:103-104
// of 7.4.0, :104 of 6.10.5). So both files hold base64, not XML. An empty
// element (no DATASTORE in the message) gives an empty file, as "".to_s
// encodes to "".
func WriteLocalDeployFiles(vmDir, vmXML, dsXML string) error {
	if err := os.MkdirAll(vmDir, 0o755); err != nil {
		return err
	}
	for name, doc := range map[string]string{"vm.xml": vmXML, "ds.xml": dsXML} {
		b64 := base64.StdEncoding.EncodeToString([]byte(doc))
		if err := os.WriteFile(filepath.Join(vmDir, name), []byte(b64), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// DriverArgs is how one_vmm_exec.rb reads its command line (the VM_MAD's
// ARGUMENTS, split on blanks by the one_vmm_exec shell wrapper's unquoted
// `execute_mad $*`, src/vmm_mad/exec/one_vmm_exec).
type DriverArgs struct {
	// Hypervisor is the first non-option word: the remotes/vmm/<name>
	// directory the driver runs (one_vmm_exec.rb:1571-1572).
	Hypervisor string
	// Local maps an upper-cased action to its local script ("" = the
	// action's own name), from the LAST -l/--local option only: each one
	// replaces the whole list (one_vmm_exec.rb:1555-1556, parse_actions_list
	// in OpenNebulaDriver.rb:162-183).
	Local map[string]string
	// Delegate are the actions run with ssh agent forwarding; "migrate"
	// unless -d/--delegate says otherwise (one_vmm_exec.rb:1544, 1557-1558).
	Delegate map[string]string
}

// vmmOptions are one_vmm_exec.rb's GetoptLong options (:1529-1537 of
// 7.4.0, :1496-1504 of 6.10.5): long name, short name, argument kind
// (0 none, 1 required, 2 optional).
var vmmOptions = []struct {
	long  string
	short byte
	arg   int
}{
	{"--retries", 'r', 2}, {"--threads", 't', 2}, {"--local", 'l', 1}, {"--delegate", 'd', 1},
	{"--shell", 's', 1}, {"--parallel", 'p', 0}, {"--timeout", 'w', 2},
}

// ParseDriverArgs reads ARGUMENTS as Ruby's GetoptLong does for
// one_vmm_exec.rb (PERMUTE ordering: options may follow the hypervisor
// word; long options may be abbreviated to a unique prefix and take
// "--opt=value" or "--opt value"; short options may be clustered and take
// "-lvalue" or "-l value"; an optional argument is the next word unless it
// starts with '-'; "--" ends the options). An error is what makes the real
// driver exit(-1) at start (one_vmm_exec.rb:1567-1569, 1574-1576).
func ParseDriverArgs(arguments string) (DriverArgs, error) {
	words := strings.Fields(arguments)
	a := DriverArgs{Local: map[string]string{}, Delegate: parseActionsList("migrate")}
	var rest []string
	set := func(long, val string) {
		switch long {
		case "--local":
			a.Local = parseActionsList(val)
		case "--delegate":
			a.Delegate = parseActionsList(val)
		}
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "--":
			rest = append(rest, words[i+1:]...)
			i = len(words)
		case strings.HasPrefix(w, "--"):
			name, val, hasVal := strings.Cut(w, "=")
			var match []int
			for j, o := range vmmOptions {
				if o.long == name {
					match = []int{j}
					break
				}
				if strings.HasPrefix(o.long, name) {
					match = append(match, j)
				}
			}
			if len(match) != 1 {
				return a, fmt.Errorf("option %s: unknown or ambiguous", name)
			}
			o := vmmOptions[match[0]]
			switch {
			case o.arg == 0 && hasVal:
				return a, fmt.Errorf("option %s takes no argument", o.long)
			case hasVal:
			case o.arg == 1:
				if i+1 >= len(words) {
					return a, fmt.Errorf("option %s requires an argument", o.long)
				}
				i++
				val = words[i]
			case o.arg == 2 && i+1 < len(words) && !strings.HasPrefix(words[i+1], "-"):
				i++
				val = words[i]
			}
			set(o.long, val)
		case strings.HasPrefix(w, "-") && len(w) > 1:
			for k := 1; k < len(w); k++ {
				idx := -1
				for j, o := range vmmOptions {
					if o.short == w[k] {
						idx = j
					}
				}
				if idx < 0 {
					return a, fmt.Errorf("invalid option -%c", w[k])
				}
				o := vmmOptions[idx]
				if o.arg == 0 {
					continue
				}
				val := w[k+1:]
				if val == "" {
					switch {
					case o.arg == 1 && i+1 >= len(words):
						return a, fmt.Errorf("option -%c requires an argument", o.short)
					case o.arg == 1, i+1 < len(words) && !strings.HasPrefix(words[i+1], "-"):
						i++
						val = words[i]
					}
				}
				set(o.long, val)
				break
			}
		default:
			rest = append(rest, w)
		}
	}
	if len(rest) == 0 {
		return a, fmt.Errorf("no hypervisor word")
	}
	a.Hypervisor = rest[0]
	return a, nil
}

// parseActionsList is OpenNebulaDriver.parse_actions_list
// (src/mad/ruby/OpenNebulaDriver.rb:162-183 of 7.4.0): comma-separated
// "action[=script]", action upper-cased, blanks around items dropped.
func parseActionsList(s string) map[string]string {
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, script, ok := strings.Cut(item, "=")
		if !ok {
			out[strings.ToUpper(name)] = ""
			continue
		}
		out[strings.ToUpper(name)] = strings.TrimSpace(script)
	}
	return out
}

// DriverResult is what oned gets from the VMM driver for one local or
// remote action that exited with code and wrote stderr: the info text
// (the VM's ERROR on failure) and the lines filed in the VM's log.
//
// 7.x (src/mad/ruby/DriverExecHelper.rb:167-207 of release-7.4.0): every
// stderr line "ERROR|INFO|WARN|DEBUG: [<id>] msg" is sent to oned as a LOG
// message of VM <id> (the VM log); the other lines, joined with blanks, are
// the failure's info. 6.x (release-6.10.5): a successful action's stderr is
// dropped; a failed one logs "Command execution failed" and the whole
// stderr (src/mad/ruby/CommandManager.rb:76-79) and its info is the whole
// stderr with newlines as blanks (CommandManager.rb:97-101,
// DriverExecHelper.rb:153-165).
func DriverResult(major int, code int, stderr string) (info string, vmLog []string) {
	if major >= 7 {
		var other []string
		for _, l := range strings.Split(stderr, "\n") {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			if lvl, rest, ok := strings.Cut(l, ":"); ok && (lvl == "ERROR" || lvl == "INFO" || lvl == "WARN" || lvl == "DEBUG") {
				vmLog = append(vmLog, lvl+":"+rest)
				continue
			}
			other = append(other, l)
		}
		if code != 0 {
			info = strings.Join(other, " ")
		}
		return info, vmLog
	}
	if code == 0 {
		return "", nil
	}
	vmLog = append(vmLog, "Command execution failed")
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		vmLog = append(vmLog, l)
	}
	return strings.TrimSpace(strings.ReplaceAll(stderr, "\n", " ")), vmLog
}
