#!/bin/sh
# rbdfence-@ROLE@ pre-removal: deb prerm, rpm %preun (packaging/package.sh
# puts the role in). On removal it runs
#
#   /usr/lib/rbdfence/install.sh @ROLE@ --uninstall
#
# which puts back exactly what the install replaced (the Ceph TM's scripts,
# the oned.conf line, an older libvirt hook) and removes what it created.
# An upgrade does nothing here: the new version's post-install updates the
# installed files in place. Under $DPKG_ROOT everything happens below it.
#
# If the uninstall fails, the removal stops (dpkg then runs the post-install
# with abort-remove, which installs again): the package is never removed
# while its wrappers or hook are left behind unaccounted for.
#
# Arguments: deb: remove | upgrade NEW | deconfigure ... | failed-upgrade OLD;
# rpm: the number of instances left (0 erase, 1 upgrade).
set -u

role='@ROLE@'
root=${DPKG_ROOT:-}
lib=$root/usr/lib/rbdfence

case ${1:-} in
remove | deconfigure | 0) ;;
*) exit 0 ;;
esac

say() { echo "rbdfence-$role: $*" >&2; }

if [ ! -f "$lib/install.sh" ]; then
	say "ERROR: $lib/install.sh is missing (the rbdfence package was removed first?): cannot undo the install; reinstall rbdfence, then remove rbdfence-$role again"
	exit 1
fi

if [ -n "$root" ]; then
	RBDFENCE_BIN=$lib/bin bash "$lib/install.sh" "$role" --prefix "$root" --uninstall
else
	RBDFENCE_BIN=$lib/bin bash "$lib/install.sh" "$role" --uninstall
fi && exit 0

say "ERROR: install.sh $role --uninstall failed (see above): the removal is stopped and rbdfence-$role stays installed; fix the cause and remove it again"
exit 1
