// Package frontend is the OpenNebula front-end side of rbdfence: the logic
// behind the drivers that oned runs as oneadmin (drivers/prestart, the VMM
// local-action wrappers deploy-rbdfence and restore-rbdfence, and the Ceph TM
// wrappers premigrate, postmigrate and failmigrate).
//
// It is pure Go (no cgo, no go-ceph): a front-end may have no Ceph libraries.
// The Ceph work runs where OpenNebula's own Ceph drivers run it, on a host:
// the host-side binary ("rbdfence host", shipped in remotes/ by onehost
// sync) is called over ssh with one hoststep.Request on stdin and answers
// one hoststep.Response on stdout. With opennebula.remote: local the start
// and premigrate steps run the binary on the front-end instead; steps that
// decide "on this host" by the host's own addresses (record, postmigrate,
// failmigrate) always run on their host over ssh.
//
// Host steps run as "<opennebula.ssh> -o BatchMode=yes -o ConnectTimeout=N
// <host> '<host_binary>' 'host' ['--config' '<host_config>']": every word
// single-quoted for the remote shell, host names checked (no option can be
// smuggled in), bounded by timeouts.ssh, the whole process group killed on
// timeout. --config is left out for the default /etc/one/rbdfence.yaml,
// so that a host without that file uses the built-in defaults (Ceph access
// from the VM's disks), as the libvirt hook does. Premigrate runs on the
// source; the wrapped remote deploy/restore and original TM scripts are
// bounded by timeouts.action.
//
// # Contracts (what oned passes)
//
//	deploy-rbdfence  <local deployment file> <host> <vmid> <host>    stdin: base64 domain XML
//	restore-rbdfence <checkpoint> <host> <deploy_id> <vmid> <host>   stdin: base64 driver action XML
//	premigrate|postmigrate|failmigrate <src> <dst> <remote_system_dir> <vmid> <sys_dsid> [caller_tm]
//	                                                                  stdin: base64 VM XML
//	prestart <vmid> [<host>]                                          (for admins and other wrappers)
//
// The deploy wrapper runs the start check, then exactly what the normal
// remote deploy does: ssh <host> <remote_dir>/vmm/kvm/deploy <remote
// deployment file> <host> <vmid> <host> with the domain XML on stdin, and
// relays its stdout (the DEPLOY_ID), stderr and exit code. The remote
// deployment file is <one:system_datastore>/<basename of the local file>,
// the path oned itself uses (History::rdeployment_file); without that
// metadata it is <datastore_location>/<system DS>/<vmid>/<basename>.
// Restore is the same with <remote_dir>/vmm/kvm/restore and the driver
// action XML. When the start check refuses, the remote action is not run.
// After a successful deploy or restore the started instance's client
// addresses are recorded in the VM's claim (best effort).
//
// # Exit codes of the drivers
//
// A wrapped action's failure exits with its own code (remote deploy/restore,
// original TM script); otherwise the code is the kind of the error
// (internal/outcome, the one table of every binary; README: Exit codes).
//
// Refusals print one plain stderr line (oned shows it as the VM's ERROR);
// progress is logged as "INFO: <vmid> rbdfence: ..." and problems that do
// not stop the action as "ERROR: <vmid> rbdfence: ...".
//
// # Migration failure policy
//
// The TM wrappers always run the original script (<name>.rbdfence-orig
// next to them) with the same arguments and stdin, after their own step;
// bash originals are sourced with $0 set to the wrapper's path so that
// migrate_other still finds tm/<other>/<name>.
//
//   - premigrate: if the handover window cannot be opened the wrapper exits
//     non-zero (after the original ran), so oned aborts the live migration
//     and the VM keeps running on the source. Going on without the window
//     would let the destination's libvirt hook fence the running source (or
//     refuse the incoming migration late). fence.fail_open does not apply:
//     a refused migration loses nothing. If the original fails after the
//     window was opened, the window is closed again with a failmigrate step
//     on the destination (best effort; it also expires on its own).
//   - postmigrate: the VM already runs on the destination and oned treats
//     this step as no-fail. Our failure is logged as ERROR lines and never
//     changes the exit code: turning a successful migration into a "failed"
//     one is exactly how zombies are made. The window then expires on its
//     own and the next start elsewhere fences the recorded addresses.
//   - failmigrate: oned ignores the result (a no-fail rollback step). The
//     original's non-zero code wins; otherwise our failure exits non-zero so
//     the VM log shows it. When the destination cannot be reached over ssh
//     the step runs on the source instead and fences every client of the
//     VM's images that is not on the source (the copy included); only when
//     neither host answers does the error say that nothing was fenced.
package frontend
