// Package frontend is the OpenNebula front-end side of rbdfence: the logic
// behind the drivers that oned runs as oneadmin (drivers/prestart and the
// VMM local actions deploy-rbdfence, restore-rbdfence and migrate-rbdfence),
// and the reading of oned.conf VM_MAD ARGUMENTS as the driver reads them
// (onedconf.go, drivers/onedconf-rbdfence). OpenNebula's own files under
// remotes/ are not replaced.
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
// source; the wrapped remote deploy, restore and attach_disk are bounded by
// timeouts.action, the real live migration by nothing of ours (MigrateVMM).
//
// # Contracts (what oned passes)
//
//	deploy-rbdfence  <local deployment file> <host> <vmid> <host>    stdin: base64 domain XML
//	restore-rbdfence <checkpoint> <host> <deploy_id> <vmid> <host>   stdin: base64 driver action XML
//	migrate-rbdfence <deploy_id> <dst> <src> <vmid> <src>             stdin: base64 driver action XML
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
// action XML. With the step on the host (remote: ssh) the check and the
// action share one ssh session (session.go: a constant script, the step's
// request and answer framed on stdin and stdout before the action's). When
// the start check refuses, the remote action is not run; it runs only once
// the front-end, having the admitting answer within the step's budget,
// sends the go line (GoLine) and then the action's stdin. After a
// successful deploy or restore the started instance's client addresses are
// recorded in the VM's claim: by the host in the background after the
// action in that session (a failure goes to the host's audit log and
// syslog), or by a separate record step when the check ran elsewhere.
//
// # Files, in the order a request walks them
//
// A deploy's stdin goes forward through the files:
//
//   - actioninput.go: what every action gets from oned (the base64 stdin,
//     the driver action XML's <VM>, VM ids and host names in argv);
//   - deploy.go, restore.go, attach.go, migrateaction.go: the actions, each
//     with its argv contract (deploy also reads vm.xml and ds.xml next to
//     the local deployment file);
//   - prestart.go: the start check, from reading the VM in oned to the
//     host's answer (audit, events, refusal, fence.fail_open);
//   - session.go: how a start reaches its host: the check and the action
//     in one ssh session, or as separate commands when they cannot share
//     one (and the record of the new instance's client addresses);
//     migratestep.go: the migration's premigrate/postmigrate/failmigrate
//     steps;
//   - hoststep.go: one host step by itself (over ssh or, with remote:
//     local, on the front-end), its budget and its "no answer" errors;
//   - ssh.go: the ssh argv (quoting, options) and a remote command run
//     through it; proc.go: a child process run with a deadline, its whole
//     process group killed at the end.
//
// env.go (the configuration and streams), errors.go, log.go and exit.go
// serve every step; collect.go (host spools to oned) and onedconf.go
// (oned.conf's VM_MAD ARGUMENTS) are their own flows.
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
// # Migration failure policy (MigrateVMM)
//
//   - the window cannot be opened: the action fails before the real
//     migration starts (exit 2-4); the VM keeps running on the source and
//     oned rolls back. fence.fail_open does not apply: a refused migration
//     loses nothing, going on would let the destination's hook fence the
//     running source.
//   - the real migration's outcome is unknown (the action was stopped while
//     it ran; ssh to the source ended with 255): nothing is fenced, the
//     window stays open, exit 3. There is no time limit of ours on it:
//     virsh migrate on the source outlives our ssh.
//   - the real migration fails: its copy on the destination is fenced and
//     the window closed (failmigrate step); the exit code is the
//     migration's own. When the destination cannot be reached over ssh the
//     step runs on the source and fences every client of the VM's images
//     that is not on the source; only when neither host answers does the
//     error say that nothing was fenced.
//   - the real migration succeeds: the window is closed and a lock owner not
//     on the destination fenced (postmigrate step); our failure is logged as
//     ERROR lines and never changes the exit code: turning a successful
//     migration into a "failed" one is how zombies are made. The window
//     then expires on its own.
package frontend
