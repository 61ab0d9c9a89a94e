#!/usr/bin/env bash
# rbdfence from a checkout, for machines without its packages:
#
#   install.sh frontend [--prefix DIR] [--apply]          the OpenNebula front-end
#   install.sh host [--prefix DIR] [--config PATH] [--domains REGEX] [--legacy]
#                                                         every KVM host
#   install.sh frontend|host [--prefix DIR] --uninstall
#
# It puts the files of the rbdfence-frontend or rbdfence-host package where
# the packages put them (packaging/layout: the OpenNebula remotes, the libvirt
# hook, the rbdfence-events timer) with two differences: the hook binary goes
# to /usr/local/libexec/rbdfence, the units to /etc/systemd/system. Binaries
# come from ./bin (make build) or $RBDFENCE_BIN (that directory, or the
# rbdfence binary in it). --prefix DIR installs below DIR (tests).
#
# frontend: then shows the oned.conf change (packaging/onedconf.sh, as the
#   package's rbdfence-onedconf does); --apply makes it. It enables
#   rbdfence-events.timer when systemd runs here (and no --prefix).
# host: the wrapper /etc/libvirt/hooks/qemu.d/10-rbdfence runs the hook with
#   --config PATH (absolute; default /etc/one/rbdfence.yaml when present) and
#   --domains REGEX (only matching domains, e.g. '^one-[0-9]+$'). libvirt
#   older than 6.5 (or --legacy) runs only /etc/libvirt/hooks/qemu: a chain
#   goes there, and a hook that was there runs after ours, same argv and stdin.
#
# Idempotent: running it again updates the files in place. What it creates
# or replaces is recorded in DIR/var/lib/rbdfence/install-<part>/manifest,
# and --uninstall restores exactly what was there (oned.conf byte for byte
# unless edited since; a config edited since is kept, and said so).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PKG=$here/packaging
# shellcheck source=packaging/libvirt-hook-notice.sh
. "$PKG/libvirt-hook-notice.sh"

PART=${1:-}
[[ $# -gt 0 ]] && shift
PREFIX="" APPLY=0 UNINSTALL=0 CONFIG="" DOMAINS="" LEGACY=0
usage() {
	echo "usage: install.sh frontend [--prefix DIR] [--apply] [--uninstall]" >&2
	echo "       install.sh host [--prefix DIR] [--config PATH] [--domains REGEX] [--legacy] [--uninstall]" >&2
	exit 2
}
log() { echo "install.sh $PART: $*" >&2; }
die() {
	echo "install.sh $PART: ERROR: $*" >&2
	exit 1
}
[[ $PART == frontend || $PART == host ]] || usage
while [[ $# -gt 0 ]]; do
	a=$1 v=""
	if [[ $a == --*=* ]]; then v=${a#*=} a=${a%%=*}; fi
	case $PART:$a in
	*:--prefix | host:--config | host:--domains)
		if [[ -z $v ]]; then
			[[ $# -ge 2 ]] || usage
			v=$2
			shift
		fi
		case $a in --prefix) PREFIX=$v ;; --config) CONFIG=$v ;; --domains) DOMAINS=$v ;; esac
		;;
	frontend:--apply) APPLY=1 ;;
	host:--legacy) LEGACY=1 ;;
	*:--uninstall) UNINSTALL=1 ;;
	*)
		echo "install.sh $PART: unknown argument '$1'" >&2
		usage
		;;
	esac
	shift
done
if [[ -n $PREFIX ]]; then
	mkdir -p "$PREFIX"
	PREFIX=$(cd "$PREFIX" && pwd)
	[[ $PREFIX == / ]] && PREFIX=""
fi
[[ -z $CONFIG || $CONFIG == /* ]] || die "--config must be an absolute path (the hook runs from libvirtd's working directory), got '$CONFIG'"

OTHER=host
[[ $PART == host ]] && OTHER=frontend
STATE=$PREFIX/var/lib/rbdfence/install-$PART
MANIFEST=$STATE/manifest
OTHER_MANIFEST=$PREFIX/var/lib/rbdfence/install-$OTHER/manifest
HOOKDIR=/usr/local/libexec/rbdfence
HOOKS=$PREFIX/etc/libvirt/hooks
CHAIN=$HOOKS/qemu
CHAIN_ORIG=$HOOKS/qemu.rbdfence-orig
REMOTES=$PREFIX/var/lib/one/remotes
MARKER="# rbdfence: libvirt qemu hook"
MARK="rbdfence/rbdfence/internal/frontend" # in every front-end binary of ours

BIN=${RBDFENCE_BIN:-$here/bin}
[[ -d $BIN ]] || BIN=$(dirname "$BIN")

sq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
sha() { sha256sum "$1" | cut -c1-64; }

# --- the manifest -----------------------------------------------------------
# One record per line, tab-separated, replayed backwards by --uninstall:
#   mode   qemu.d|legacy       (host) how the hook is installed
#   dir    PATH                created: removed when empty
#   absent PATH                did not exist: removed
#   conf   PATH SHA256         did not exist: removed unless edited since
#   backup PATH FILE           existed: restored from FILE
#   moved  PATH TO             the site's legacy hook, moved to TO: moved back
# A path both parts created (/var/lib/rbdfence) is in both manifests and
# goes with the last part uninstalled.

record() {
	local IFS=$'\t'
	printf '%s\n' "$*" >>"$MANIFEST"
}
# recorded FILE PATH: FILE records PATH (as anything but mode).
recorded() { [[ -f $1 ]] && awk -F'\t' -v p="$2" '$1 != "mode" && $2 == p { f = 1 } END { exit !f }' "$1"; }
# shared PATH: the other part created PATH too (it removes it if it goes last).
shared() { [[ -f $OTHER_MANIFEST ]] && awk -F'\t' -v p="$1" '($1 == "dir" || $1 == "absent" || $1 == "conf") && $2 == p { f = 1 } END { exit !f }' "$OTHER_MANIFEST"; }

# remember PATH [conf]: before PATH is first written, note what was there.
remember() {
	local p=$1 n
	recorded "$MANIFEST" "$p" && return 0
	if [[ -e $p || -L $p ]] && ! shared "$p"; then
		n=$(($(wc -l <"$MANIFEST") + 1))
		mkdir -p "$STATE/backup"
		cp -a "$p" "$STATE/backup/$n"
		record backup "$p" "$STATE/backup/$n"
	elif [[ ${2:-} == conf ]]; then
		record conf "$p" -
	else
		record absent "$p"
	fi
}

# mkdirs DIR: DIR and its missing parents, each recorded.
mkdirs() {
	local d=$1 missing=()
	while [[ -n $d && $d != / && ! -d $d ]]; do
		missing=("$d" "${missing[@]}")
		d=$(dirname "$d")
	done
	for d in "${missing[@]}"; do
		mkdir -m 0755 "$d"
		recorded "$MANIFEST" "$d" || record dir "$d"
	done
	# A directory the other part created and recorded is shared.
	d=$1
	while [[ -n $d && $d != / ]]; do
		if shared "$d" && ! recorded "$MANIFEST" "$d"; then record dir "$d"; fi
		d=$(dirname "$d")
	done
}

# put SRC DST MODE: install SRC as DST (owner of DST's directory), atomically.
put() {
	local src=$1 dst=$2 mode=$3
	mkdirs "$(dirname "$dst")"
	remember "$dst"
	if [[ $mode == link ]]; then
		ln -sfn "$src" "$dst.rbdfence-new"
	else
		cp "$src" "$dst.rbdfence-new"
		chmod "$mode" "$dst.rbdfence-new"
		chown --reference="$(dirname "$dst")" "$dst.rbdfence-new" 2>/dev/null || true
	fi
	mv -Tf "$dst.rbdfence-new" "$dst"
}

# put_conf SRC DST MODE: a conffile of the packages: only where there is none.
put_conf() {
	local src=$1 dst=$2 mode=$3
	recorded "$MANIFEST" "$dst" && return 0
	mkdirs "$(dirname "$dst")"
	if [[ -e $dst ]]; then
		shared "$dst" && record conf "$dst" "$(awk -F'\t' -v p="$dst" '$2 == p { print $3 }' "$OTHER_MANIFEST")"
		return 0
	fi
	install -m "$mode" "$src" "$dst"
	record conf "$dst" "$(sha "$dst")"
	log "wrote $dst"
}

# --- state ------------------------------------------------------------------

# open_state: the state directory (its missing parents recorded) and its lock.
open_state() {
	local fresh=0 d=$STATE created=()
	while [[ -n $d && $d != / && ! -d $d ]]; do
		created=("$d" "${created[@]}")
		d=$(dirname "$d")
	done
	mkdir -p "$STATE"
	exec 9>"$STATE/lock"
	flock -w 60 9 || die "another install.sh holds $STATE/lock"
	[[ -f $MANIFEST ]] || fresh=1
	touch "$MANIFEST"
	adopt_created
	if ((fresh)); then
		for d in "${created[@]}"; do record dir "$d"; done
		mkdirs "$STATE"
	fi
}

OLD_DEFAULT_CONFIG=955a09464d1df7b1da157a781a38dc669b257416cd68e7ee12237a1108d3e71d

# adopt_created: an rbdfence before this one recorded the front-end's files
# as a list of created paths (and kept an admin's units in units/): they
# become manifest records. The oned.conf record and the copies of
# migrate-rbdfence for wrapped scripts are onedconf.sh's (it takes them).
adopt_created() {
	local old=$STATE/created p u
	[[ -f $old ]] || return 0
	while IFS= read -r p; do
		[[ -n $p ]] || continue
		if [[ $p == "$REMOTES/vmm/kvm/"*-rbdfence && ! $p =~ /(deploy|restore|migrate|attach)-rbdfence$ ]]; then
			continue
		elif [[ $p == "$PREFIX/etc/one/rbdfence.yaml" ]]; then
			# Unedited if it is the default that install.sh wrote (one text in
			# every release before: its sha256), kept at --uninstall if not.
			if [[ -f $p && $(sha "$p") == "$OLD_DEFAULT_CONFIG" ]]; then record conf "$p" "$OLD_DEFAULT_CONFIG"; else record conf "$p" -; fi
		elif [[ -d $p && ! -L $p ]]; then
			record dir "$p"
		else
			record absent "$p"
		fi
	done <"$old"
	for u in "$STATE"/units/*.orig; do
		[[ -e $u ]] || continue
		record backup "$PREFIX/etc/systemd/system/$(basename "$u" .orig)" "$u"
	done
	# What stays in the list is onedconf.sh's to take.
	grep -E "^$REMOTES/vmm/kvm/.*-rbdfence$" "$old" | grep -vE '/(deploy|restore|migrate|attach)-rbdfence$' >"$old.tmp" || true
	if [[ -s $old.tmp ]]; then mv -f "$old.tmp" "$old"; else rm -f "$old" "$old.tmp"; fi
}

# --- the layout -------------------------------------------------------------

# layout_files PACKAGE...: the layout lines (mode path source flags) of
# these packages that install.sh installs, placeholders filled in.
layout_files() {
	local pkg mode path src flags want
	while read -r pkg mode path src flags; do
		[[ -n $pkg && $pkg != \#* ]] || continue
		[[ ,$flags, == *,pkg,* || ,$flags, == *,wrapper,* ]] && continue
		want=0
		for w in "$@"; do
			[[ $pkg == "$w" ]] && want=1
			[[ $w == rbdfence-$PART && $pkg == rbdfence && ,$flags, == *,$PART,* ]] && want=1
		done
		((want)) || continue
		path=${path//@UNITDIR@//etc/systemd/system}
		path=${path//@HOOKDIR@/$HOOKDIR}
		printf '%s %s %s %s\n' "$mode" "$PREFIX$path" "$src" "$flags"
	done <"$PKG/layout"
}

# fill FILE OPTIONS: FILE with @HOOK@ (the hook binary, quoted) and
# @OPTIONS@ filled in.
fill() {
	local c
	c=$(cat "$1")
	c=${c//@HOOK@/"$(sq "$PREFIX$HOOKDIR/rbdfence-hook")"}
	printf '%s\n' "${c//@OPTIONS@/"$2"}"
}

# source_of SRC: the file a layout SOURCE names (files/ get @HOOK@ filled in).
source_of() {
	case $1 in
	bin/*)
		local b=$BIN/${1#bin/}
		[[ -x $b ]] || die "$b not found: run 'make build' or set RBDFENCE_BIN"
		echo "$b"
		;;
	files/*)
		fill "$PKG/$1" "" >"$STATE/src.$$.${1#files/}"
		echo "$STATE/src.$$.${1#files/}"
		;;
	*) echo "$PKG/$1" ;;
	esac
}

install_layout() {
	local mode path src flags s
	while read -r mode path src flags; do
		case $mode in
		dir) [[ $path == "${SKIP_DIR:-}" ]] || mkdirs "$path" ;;
		link) put "$src" "$path" link ;;
		*)
			s=$(source_of "$src")
			if [[ ,$flags, == *,conf,* ]]; then put_conf "$s" "$path" "$mode"; else put "$s" "$path" "$mode"; fi
			;;
		esac
	done < <(layout_files "rbdfence-$PART")
	rm -f "$STATE"/src.$$.*
}

# --- uninstall --------------------------------------------------------------

do_uninstall() {
	[[ -f $MANIFEST ]] || {
		log "nothing to uninstall under ${PREFIX:-/}"
		return 0
	}
	local kind a b dirs
	while IFS=$'\t' read -r kind a b; do
		case $kind in
		absent) shared "$a" || rm -f "$a" ;;
		conf)
			if shared "$a"; then
				:
			elif [[ -f $a && ($b == - || $(sha "$a") != "$b") ]]; then
				log "kept $a: it was edited since the install"
			else
				rm -f "$a"
			fi
			;;
		backup)
			rm -rf "$a"
			cp -a "$b" "$a"
			;;
		moved)
			rm -f "$a"
			[[ -e $b ]] && mv -f "$b" "$a"
			;;
		esac
	done < <(tac "$MANIFEST")
	dirs=$(awk -F'\t' '$1 == "dir" { print $2 }' "$MANIFEST" | tac)
	local keep=()
	while IFS= read -r a; do
		[[ -n $a ]] && shared "$a" && keep+=("$a")
	done <<<"$dirs"
	rm -rf "$STATE"
	while IFS= read -r a; do
		[[ -n $a && -d $a ]] || continue
		[[ " ${keep[*]} " == *" $a "* ]] && continue
		rmdir "$a" 2>/dev/null || log "kept $a: not empty"
	done <<<"$dirs"
}

# --- front-end --------------------------------------------------------------

systemd_live() { [[ -z $PREFIX ]] && command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; }
onedconf() { bash "$PKG/onedconf.sh" ${PREFIX:+--prefix "$PREFIX"} --tool "$BIN/onedconf-rbdfence" "$@"; }

# An rbdfence before the VMM migrate action wrapped OpenNebula's tm/ceph
# migrate scripts, keeping them as <op>.rbdfence-orig: they go back.
restore_tm() {
	local op orig tm=$REMOTES/tm/ceph
	for op in premigrate postmigrate failmigrate; do
		orig=$tm/$op.rbdfence-orig
		[[ -e $orig ]] || continue
		if awk -F'\t' -v p="$orig" '$1 == "absent" && $2 == p { f = 1 } END { exit !f }' "$MANIFEST"; then
			rm -f "$orig" # a stub the earlier install made
			grep -qaF "$MARK" "$tm/$op" 2>/dev/null && rm -f "$tm/$op"
		elif [[ -e $tm/$op ]] && ! grep -qaF "$MARK" "$tm/$op"; then
			rm -f "$orig" # OpenNebula's script is back (an upgrade of OpenNebula)
		else
			mv -f "$orig" "$tm/$op"
			log "tm/ceph/$op: OpenNebula's script is back in place (rbdfence no longer wraps it)"
		fi
	done
}

install_frontend() {
	[[ -d $REMOTES/vmm/kvm ]] || die "$REMOTES/vmm/kvm not found: is this an OpenNebula front-end (use --prefix for a test tree)?"
	[[ -x $BIN/onedconf-rbdfence ]] || die "$BIN/onedconf-rbdfence not found: run 'make build' or set RBDFENCE_BIN"
	# --apply must not leave a half install: can oned.conf be changed?
	if ((APPLY)) && ! onedconf --check; then
		die "--apply: oned.conf cannot be changed safely (nothing was installed)"
	fi
	open_state
	install_layout
	restore_tm
	[[ -e $REMOTES/hooks/ft/host_error.rb ]] || log "no $REMOTES/hooks/ft/host_error.rb (OpenNebula's HA hook): the host fence is installed but cannot run before it is there"
	local timer_on=0 rc=0
	if systemd_live; then
		if systemctl daemon-reload && systemctl enable --now rbdfence-events.timer >/dev/null 2>&1; then
			timer_on=1
			log "rbdfence-events.timer enabled: spooled events (here and on the KVM hosts) reach oned every minute"
		else
			log "WARNING: could not enable rbdfence-events.timer: run 'systemctl enable --now rbdfence-events.timer'"
		fi
	fi
	local before
	before=$(sha "$PREFIX/etc/one/oned.conf" 2>/dev/null || true)
	if ((APPLY)); then onedconf --apply || rc=$?; else onedconf || rc=$?; fi
	case $rc in
	0 | 3) ;;
	4) echo "(or run install.sh frontend --apply to make it)" ;;
	*) die "onedconf.sh failed (exit $rc)" ;;
	esac
	echo "Next steps:"
	if [[ $rc != 0 || $before != "$(sha "$PREFIX/etc/one/oned.conf" 2>/dev/null || true)" ]]; then
		echo "  - restart oned (systemctl restart opennebula) after the VM_MAD change"
	fi
	echo "  - run 'onehost sync --force' as oneadmin: it copies rbdfence-host to /var/tmp/one/rbdfence/ on every host"
	echo "  - on every KVM host: install.sh host (the libvirt hook; hosts need no oned credentials)"
	((timer_on)) || echo "  - enable the delivery of spooled events (here and on the hosts): systemctl enable --now rbdfence-events.timer"
	echo "  - check with 'rbdfence doctor --role frontend'"
	echo "  - optional, HA without a BMC (README: Host failure): give this front-end Ceph access, then"
	echo "    as oneadmin: onehook create $REMOTES/hooks/rbdfence/host_error.hook"
	echo "  - optional, where oneadmin's ssh does not multiplex (no ControlPath in its ssh config): open rbdfence's ssh"
	echo "    masters while PROLOG and a live migration's tm premigrate run (README: ssh without multiplexing), as oneadmin:"
	echo "    onehook create $REMOTES/hooks/rbdfence/prolog_ssh.hook; onehook create $REMOTES/hooks/rbdfence/migrate_ssh.hook"
}

uninstall_frontend() {
	[[ -d $STATE ]] || {
		log "nothing to uninstall ($STATE not found)"
		return 0
	}
	exec 9>"$STATE/lock"
	flock -w 60 9 || die "another install.sh holds $STATE/lock"
	onedconf --undo
	touch "$MANIFEST"
	adopt_created
	if systemd_live; then systemctl disable --now rbdfence-events.timer >/dev/null 2>&1 || true; fi
	do_uninstall
	if systemd_live; then systemctl daemon-reload || true; fi
	log "uninstalled; the copies under /var/tmp/one/rbdfence on the hosts are no longer used"
}

# --- host -------------------------------------------------------------------

libvirt_version() {
	local b v
	for b in libvirtd virtqemud; do
		command -v "$b" >/dev/null 2>&1 || continue
		v=$("$b" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n1 || true)
		[[ -n $v ]] && echo "$v" && return 0
	done
	return 0
}

# hook_script: the wrapper (qemu.d) or the chain (legacy) that runs the hook.
hook_script() {
	local opts="" hook
	hook=$(sq "$PREFIX$HOOKDIR/rbdfence-hook")
	[[ -n $CONFIG ]] && opts+=" --config $(sq "$CONFIG")"
	[[ -n $DOMAINS ]] && opts+=" --domains $(sq "$DOMAINS")"
	if [[ $1 == qemu.d ]]; then
		fill "$PKG/files/10-rbdfence" "$opts"
		return
	fi
	cat <<EOF
#!/bin/sh
$MARKER chain for libvirt < 6.5 (installed by rbdfence
# install.sh host; remove it with: install.sh host --uninstall). Runs
# rbdfence's hook, then the hook that was here before (kept at
# $CHAIN_ORIG) with the same argv and stdin. As libvirt does with
# qemu.d/, every hook runs; the exit status is rbdfence's when it failed, the
# original's otherwise. Only the original writes stdout.
EOF
	# $(cat; echo x) keeps trailing newlines; the x is cut off again.
	echo 'input=$(cat; echo x)'
	echo 'input=${input%x}'
	echo "printf %s \"\$input\" | $hook$opts -- \"\$@\" >/dev/null"
	echo 'rc=$?'
	echo "orig=$(sq "$CHAIN_ORIG")"
	echo 'if [ -f "$orig" ] && [ -x "$orig" ]; then'
	echo '	printf %s "$input" | "$orig" "$@"'
	echo '	orc=$?'
	echo '	[ "$rc" -eq 0 ] && rc=$orc'
	echo 'fi'
	echo 'exit "$rc"'
}

install_host() {
	local mode=qemu.d v prev notice=""
	[[ -x $BIN/rbdfence-hook ]] || die "hook binary $BIN/rbdfence-hook not found: run 'make build' or set RBDFENCE_BIN"
	v=$(libvirt_version)
	if ((LEGACY)); then
		mode=legacy
	elif [[ -n $v ]] && { IFS=. read -r ma mi _ <<<"$v" && ((ma < 6 || (ma == 6 && mi < 5))); }; then
		log "libvirt $v runs only /etc/libvirt/hooks/qemu (qemu.d/ needs 6.5): installing the legacy chain"
		mode=legacy
	fi
	[[ -z $CONFIG || -r $CONFIG ]] || log "warning: config $CONFIG is not readable yet: RBD domains will not start until it is"
	[[ -n $PREFIX ]] || notice=$(libvirt_hook_notice "$HOOKS")
	open_state
	prev=$(awk -F'\t' '$1 == "mode" { print $2; exit }' "$MANIFEST")
	if [[ -n $prev && $prev != "$mode" ]]; then
		log "switching from the $prev install to $mode"
		do_uninstall
		open_state
		prev=""
	fi
	[[ -n $prev ]] || record mode "$mode"
	[[ $mode == qemu.d ]] || SKIP_DIR=$PREFIX/etc/libvirt/hooks/qemu.d
	install_layout
	local script=$STATE/hook.new dst=$PREFIX/etc/libvirt/hooks/qemu.d/10-rbdfence
	hook_script "$mode" >"$script"
	if [[ $mode == legacy ]]; then
		dst=$CHAIN
		if ! recorded "$MANIFEST" "$CHAIN" && [[ -e $CHAIN ]] && ! grep -qF "$MARKER" "$CHAIN"; then
			[[ -e $CHAIN_ORIG ]] && die "$CHAIN_ORIG exists already: move it away first"
			mv "$CHAIN" "$CHAIN_ORIG"
			record moved "$CHAIN" "$CHAIN_ORIG"
			log "kept the existing hook as $CHAIN_ORIG; the chain calls it after rbdfence's"
		fi
	fi
	put "$script" "$dst" 0755
	rm -f "$script"
	log "installed $PREFIX$HOOKDIR/rbdfence-hook and $dst"
	[[ -z $notice ]] || log "$notice"
}

uninstall_host() {
	if [[ -d $STATE ]]; then
		exec 9>"$STATE/lock"
		flock -w 60 9 || die "another install.sh holds $STATE/lock"
	fi
	do_uninstall
	[[ -d $STATE ]] || log "uninstalled; restored what was there before"
}

if ((UNINSTALL)); then "uninstall_$PART"; else "install_$PART"; fi
