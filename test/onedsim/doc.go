// Package onedsim is a stand-in for oned, OpenNebula's daemon, faithful
// where rbdfence depends on it: the XML-RPC wire format of xmlrpc-c, oned's
// answer arrays and error codes, VM documents shaped like OpenNebula 6.x
// output, and the template parser and merge semantics of one.vm.update.
// Tests drive it only through real clients (goca via internal/opennebula,
// or the rbdfence binaries); it is not a mock of rbdfence's code.
//
// # XML-RPC (POST /RPC2)
//
// Every call's first parameter is the session "user:password"; a wrong one
// is answered as oned does:
//
//	[false, "[one.vm.info] User couldn't be authenticated, aborting call.", 0x0100, -1, 0]
//
// Successful calls answer [true, body, 0] where body is a string (XML
// document) or an int (object id); failures answer
// [false, message, code, resp_id, replication index (i8)] with oned's codes:
// AUTHENTICATION 0x0100, AUTHORIZATION 0x0200, NO_EXISTS 0x0400,
// ACTION 0x0800, XML_RPC_API 0x1000, INTERNAL 0x2000, ALLOCATE 0x4000,
// LOCKED 0x8000. Unknown methods and wrong parameter types get xmlrpc-c
// faults (-506 "Method 'x' not defined", -501 type mismatch).
//
// Methods:
//
//	one.vm.info(session, id[, decrypt])         full <VM>, every HISTORY
//	one.vm.update(session, id, template[, type]) 0 replace, 1 merge the USER_TEMPLATE
//	one.vmpool.info(session, who, start, end[, state])         short <VM>s
//	one.vmpool.infoextended(session, who, start, end[, state]) full <VM>s, last HISTORY
//	one.system.version(session)
//	one.host.info(session, id[, decrypt])      <HOST> (Host.cc:401-429), VMS from the VMs' last HISTORY
//	one.hostpool.info(session)                 <HOST_POOL>
//	one.host.update(session, id, template[, type]) 0 replace, 1 merge the host's TEMPLATE
//	one.hookpool.info(session, filter, start, end) <HOOK_POOL/>: the sim runs no hooks
//
// one.vm.update parses the template as oned does (XML when it starts with
// '<', else OpenNebula syntax: NAME = "value", NAME = [ A = "x", B = y ],
// names upper-cased, the only escape \"); in merge mode every attribute
// name present in the update first erases all attributes of that name
// (Template::merge), so repeated vector attributes are replaced as a set.
// Parse errors fail with ACTION "[one.vm.update] Parse error: ..." (oned's
// own text after that prefix is bison's; TestStandInMatchesOned in
// test/oned checks the code and the prefix against the real oned). Short pool documents (one.vmpool.info) carry DISKs
// without SOURCE or CEPH_* and a reduced user template, like
// VirtualMachine::to_xml_short.
//
// # VMs
//
// Build them with VM{...}.XML() (Ceph disks by default: TYPE and DISK_TYPE
// RBD, SOURCE pool/one-IMAGE_ID, CLONE YES unless Persistent, CEPH_* and
// POOL_NAME as inherited from a Ceph datastore), or load oned's own output
// with AddVM (a <VM> or a <VM_POOL>, as TestStandInMatchesOned does).
//
// # In-process control
//
//	sim := onedsim.New("oneadmin:secret")
//	sim.Put(onedsim.VM{ID: 42, Host: "node1", Seq: 3, Disks: []onedsim.Disk{{ID: 0, ImageID: 7}}})
//	sim.Start("127.0.0.1:0"); defer sim.Close()
//	sim.SetDelay(2 * time.Second)          // every call answers late
//	sim.SetDown(true)                      // listener closed: connection refused
//	sim.SetFailCalls("one.vm.update", 2)   // next 2 calls fail with INTERNAL
//	sim.Updates(); sim.UserTemplate(42)
//	sim.PutHost(onedsim.Host{ID: 1, Name: "node1", State: onedsim.HostError, LastMonitored: t})
//	sim.HostTemplate(1)
//
// # What it is kept for
//
// The real oned (test/oned) runs every lifecycle scenario it can produce.
// The stand-in stays for what it will not do on demand: one.vm.update or
// one.host.update failing with a chosen code, oned slow or down in the middle
// of a step (SetDelay, SetFailCalls, SetDown), and for the fast unit tests of
// the packages that talk to oned. TestStandInMatchesOned (test/oned) checks
// each behaviour listed above against oned 7.4.0.
package onedsim
