package onedsim

import (
	"encoding/base64"
	"strconv"
)

// LiveMigration plays the VMM driver's MIGRATE action (live migration,
// one_vmm_exec.rb:598-673 of release-7.4.0, :613-680 of release-6.10.5)
// with the TM drivers' migrate scripts as OpenNebula ships them, so that a
// test sees which of its scripts run, in which order, and which exit
// statuses count. Run executes one step and returns its exit code; vnm
// steps are left out (no network drivers in the tests).
type LiveMigration struct {
	// SystemTM is the system datastore's TM_MAD (ceph, shared, ssh, ...);
	// DiskTMs the TM_MAD of each of the VM's disks.
	SystemTM string
	DiskTMs  []string
	// Local is the kvm VM_MAD's local actions as the driver reads them
	// (DriverArgs.Local).
	Local map[string]string
	Run   func(s MigrationStep) int
}

// MigrationStep is one script the migration runs.
type MigrationStep struct {
	// Kind: "tm" (remotes/tm/<Script>, on the front-end), "vmm-local"
	// (remotes/vmm/kvm/<Script> on the front-end) or "vmm-remote" (the
	// host's vmm/kvm/<Script> on the source, over the driver's ssh stream).
	Kind   string
	Script string
	Args   []string
	Stdin  string
}

// Migrate runs the migration of VM vm (deploy id, system datastore dsid,
// its remote system dir) from src to dst; vmXML is the VM as oned has it,
// actionXML the VMM_DRIVER_ACTION_DATA. It reports whether oned sees a
// success, and the steps in order.
func (m LiveMigration) Migrate(vm int, deployID, src, dst, sysDir string, dsid int, vmXML, actionXML string) (bool, []MigrationStep) {
	var trace []MigrationStep
	run := func(s MigrationStep) int { trace = append(trace, s); return m.Run(s) }
	tmArgs := []string{src, dst, sysDir, strconv.Itoa(vm), strconv.Itoa(dsid)}
	vm64 := base64.StdEncoding.EncodeToString([]byte(vmXML))
	// A TM migrate script of the system datastore. Only tm/ceph's is the
	// script itself here; the others (ssh, shared, qcow2, ...) do their own
	// work and call migrate_other, which runs the same script of every
	// other TM_MAD of the disks with the caller's name appended and
	// IGNORES its exit status (src/tm_mad/tm_common.sh:143-179, :175).
	// Their failmigrate is tm/common/failmigrate: exit 0, no migrate_other.
	tm := func(op string) int {
		if m.SystemTM == "ceph" {
			return run(MigrationStep{Kind: "tm", Script: "ceph/" + op, Args: tmArgs, Stdin: vm64})
		}
		if op == "failmigrate" {
			return 0
		}
		seen := map[string]bool{m.SystemTM: true}
		for _, t := range m.DiskTMs {
			if seen[t] {
				continue
			}
			seen[t] = true
			_ = run(MigrationStep{Kind: "tm", Script: t + "/" + op, Args: append(append([]string{}, tmArgs...), m.SystemTM), Stdin: vm64})
		}
		return 0
	}
	// tm_premigrate; on failure tm_failmigrate (no_fail) and abort.
	if tm("premigrate") != 0 {
		tm("failmigrate")
		return false, trace
	}
	// The VMM migrate step: [:deploy_id, :dest_host, :host] plus do_action's
	// "<id> <host>" (OpenNebulaDriver.rb:98); local: stdin base64
	// (OpenNebulaDriver.rb:103-104), remote: the XML (ssh stream).
	args := []string{deployID, dst, src, strconv.Itoa(vm), src}
	var code int
	if script, ok := m.Local["MIGRATE"]; ok {
		if script == "" {
			script = "migrate"
		}
		code = run(MigrationStep{Kind: "vmm-local", Script: script, Args: args, Stdin: base64.StdEncoding.EncodeToString([]byte(actionXML))})
	} else {
		code = run(MigrationStep{Kind: "vmm-remote", Script: "migrate", Args: args, Stdin: actionXML})
	}
	if code != 0 {
		tm("failmigrate")
		return false, trace
	}
	// tm_postmigrate is no_fail: oned sees a success whatever it says.
	tm("postmigrate")
	return true, trace
}
