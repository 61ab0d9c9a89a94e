#!/bin/sh
# rbdfence-@ROLE@ post-install: deb postinst, rpm %post (packaging/package.sh
# puts the role in). It runs the installer the package ships:
#
#   RBDFENCE_BIN=/usr/lib/rbdfence/bin /usr/lib/rbdfence/install.sh @ROLE@
#
# (for the front-end without --apply: oned.conf is not edited, the change of
# the kvm VM_MAD is printed). Under $DPKG_ROOT (dpkg --root with
# --force-script-chrootless) everything happens below that root.
#
# A failure is never silent. On a first install the installer's work is
# undone (install.sh @ROLE@ --uninstall), so nothing of rbdfence is active,
# and the script fails: dpkg leaves the package unconfigured and says so,
# rpm prints a scriptlet error. On an upgrade the files are left as the
# failed run left them and the message says so.
#
# Arguments: deb: configure [OLD] | abort-upgrade | abort-remove |
# abort-deconfigure; rpm: the number of installed instances (1 install,
# 2 upgrade).
set -u

role='@ROLE@'
root=${DPKG_ROOT:-}
lib=$root/usr/lib/rbdfence
state=$root/var/lib/rbdfence/install-$role

case ${1:-} in
configure | abort-upgrade | abort-remove | abort-deconfigure)
	fmt=deb
	retry="dpkg --configure -a"
	;;
[0-9]*)
	fmt=rpm
	retry="$lib/install.sh $role"
	;;
*) exit 0 ;;
esac

say() { echo "rbdfence-$role: $*" >&2; }

# installer ARGS...: install.sh for our role, below $DPKG_ROOT if set.
installer() {
	if [ -n "$root" ]; then
		RBDFENCE_BIN=$lib/bin bash "$lib/install.sh" "$role" --prefix "$root" "$@"
	else
		RBDFENCE_BIN=$lib/bin bash "$lib/install.sh" "$role" "$@"
	fi
}

if [ ! -f "$lib/install.sh" ]; then
	say "ERROR: $lib/install.sh is missing (is the rbdfence package installed?): nothing was installed; install it, then run: $retry"
	exit 1
fi

# A first install (nothing recorded yet) is rolled back on failure; an
# upgrade or a re-run keeps what was there.
fresh=1
[ -d "$state" ] && fresh=0

# The host role runs the packaged hook binary in place (no copy to /usr/local).
extra=""
[ "$role" = host ] && extra="--hook-bin /usr/lib/rbdfence/bin/rbdfence-hook"
# shellcheck disable=SC2086
if installer $extra; then
	if [ "$role" = frontend ]; then
		say "the oned.conf change above is yours to make (or run: $lib/install.sh frontend${root:+ --prefix $root} --apply); on every KVM host install rbdfence-host."
	fi
	exit 0
fi

if [ "$fresh" = 1 ]; then
	say "ERROR: install.sh $role failed (see above): undoing what it did"
	if installer --uninstall; then
		say "ERROR: rolled back: rbdfence-$role is NOT active (nothing of it is in OpenNebula's or libvirt's paths)."
	else
		say "ERROR: the roll-back failed too: the system may be HALF-INSTALLED; see $state and run '$lib/install.sh $role --uninstall' by hand."
	fi
else
	say "ERROR: install.sh $role failed (see above) while updating an existing install: the files are as the failed run left them (some may be the old version)."
fi
if [ "$fmt" = deb ]; then
	say "Fix the cause, then run: $retry (or remove the package: dpkg -r rbdfence-$role)."
else
	say "Fix the cause, then run: $retry (or remove the package: rpm -e rbdfence-$role)."
fi
exit 1
