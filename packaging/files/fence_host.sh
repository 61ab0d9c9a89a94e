#!/bin/bash
# rbdfence: the host fence of OpenNebula's HA hook. host_error.rb (the link
# next to this file) pipes the failed host's XML, base64, on stdin;
# rbdfence fence-host re-reads the host from oned, refuses a host that is not
# in ERROR/OFFLINE or still reports, blocklists every Ceph client of its VMs
# and exits 0 only when that is complete. Needs Ceph access on this machine
# (ceph.* in /etc/one/rbdfence.yaml, a keyring readable by oneadmin).
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../rbdfence/rbdfence-host" fence-host "$@"
