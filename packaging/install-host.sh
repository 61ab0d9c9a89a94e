#!/usr/bin/env bash
# rbdfence host part: the libvirt qemu hook on every KVM host.
#
#   install.sh host [--prefix DIR] [--config PATH] [--legacy] [--domains REGEX]
#   install.sh host [--prefix DIR] --uninstall
#
# Installs
#   DIR/usr/local/libexec/rbdfence/rbdfence-hook   the hook binary (from ./bin,
#                                                 `make build`, or $RBDFENCE_BIN:
#                                                 a directory or the binary)
#   DIR/etc/libvirt/hooks/qemu.d/10-rbdfence       a wrapper that runs it
# libvirt >= 6.5 runs every executable in qemu.d/. For older libvirt (found
# with `libvirtd --version`, or forced with --legacy) the wrapper is a chain
# at DIR/etc/libvirt/hooks/qemu instead: an existing hook there is moved to
# qemu.rbdfence-orig and called after ours with the same argv and stdin.
#
# Config: libvirtd runs hooks with a fixed argv and a minimal environment
# (no $RBDFENCE_CONFIG), so the wrapper carries the config path: with
# --config PATH it runs the hook with --config PATH (the file must then
# exist); without, the hook reads /etc/one/rbdfence.yaml when present and
# uses the built-in defaults otherwise (Ceph access from the domain's disks
# and /etc/ceph/ceph.client.libvirt.keyring).
#
# --hook-bin PATH uses a hook binary that is already installed (the
# packages: /usr/lib/rbdfence/bin/rbdfence-hook) instead of copying one to
# /usr/local/libexec; PATH is written as the installed system sees it.
#
# --domains REGEX limits the hook to domains whose name matches (e.g.
# '^one-[0-9]+$' on a host that also runs domains OpenNebula does not
# manage); by default every domain with RBD disks is protected.
#
# Idempotent: running it again updates the files in place. Everything it
# replaces or creates is recorded in DIR/var/lib/rbdfence/install-host/, and
# --uninstall restores exactly what was there before the first install.
#
# libvirtd runs qemu hooks only if /etc/libvirt/hooks/qemu or an executable
# in qemu.d/ existed when it started: if none did, restart libvirtd once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

PREFIX=""
CONFIG=""
LEGACY=0
DOMAINS=""
UNINSTALL=0
HOOK_BIN=""

usage() {
	echo "usage: install.sh host [--prefix DIR] [--config PATH] [--legacy] [--domains REGEX] [--hook-bin PATH] [--uninstall]" >&2
	exit 2
}
log() { echo "install-host: $*" >&2; }
die() {
	echo "install-host: ERROR: $*" >&2
	exit 1
}

while [[ $# -gt 0 ]]; do
	case $1 in
	--prefix)
		[[ $# -ge 2 ]] || usage
		PREFIX=$2
		shift 2
		;;
	--prefix=*)
		PREFIX=${1#*=}
		shift
		;;
	--config)
		[[ $# -ge 2 ]] || usage
		CONFIG=$2
		shift 2
		;;
	--config=*)
		CONFIG=${1#*=}
		shift
		;;
	--domains)
		[[ $# -ge 2 ]] || usage
		DOMAINS=$2
		shift 2
		;;
	--domains=*)
		DOMAINS=${1#*=}
		shift
		;;
	--legacy)
		LEGACY=1
		shift
		;;
	--hook-bin)
		[[ $# -ge 2 ]] || usage
		HOOK_BIN=$2
		shift 2
		;;
	--hook-bin=*)
		HOOK_BIN=${1#*=}
		shift
		;;
	--uninstall)
		UNINSTALL=1
		shift
		;;
	-h | --help) usage ;;
	*)
		echo "install-host: unknown argument '$1'" >&2
		usage
		;;
	esac
done

if [[ -n $PREFIX ]]; then
	mkdir -p "$PREFIX"
	PREFIX=$(cd "$PREFIX" && pwd)
	[[ $PREFIX == / ]] && PREFIX=""
fi
if [[ -n $CONFIG && $CONFIG != /* ]]; then
	die "--config must be an absolute path (the hook runs from libvirtd's working directory), got '$CONFIG'"
fi

BIN_DIR=$PREFIX/usr/local/libexec/rbdfence
BIN_DST=$BIN_DIR/rbdfence-hook
# BIN_RUN is the path the wrapper runs. With --hook-bin PATH (the packages:
# /usr/lib/rbdfence/bin/rbdfence-hook) the binary is already in place and
# PATH is written as the installed system sees it, also under --prefix
# (dpkg --root); nothing is copied to /usr/local.
BIN_RUN=$BIN_DST
if [[ -n $HOOK_BIN ]]; then
	[[ $HOOK_BIN == /* ]] || die "--hook-bin must be an absolute path, got '$HOOK_BIN'"
	BIN_RUN=$HOOK_BIN
fi
HOOKS=$PREFIX/etc/libvirt/hooks
QEMU_D=$HOOKS/qemu.d
ENTRY=$QEMU_D/10-rbdfence
LEGACY_HOOK=$HOOKS/qemu
ORIG=$HOOKS/qemu.rbdfence-orig
STATE=$PREFIX/var/lib/rbdfence/install-host
MANIFEST=$STATE/manifest
BACKUPS=$STATE/backup
MARKER="# rbdfence: libvirt qemu hook"

# sq quotes a string for sh: 'it'\''s'.
sq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

# --- manifest ---------------------------------------------------------------
# One record per line, fields separated by a tab, replayed backwards by
# --uninstall:
#   mode   qemu.d|legacy
#   dir    PATH            created by us: removed when empty
#   absent PATH            did not exist: removed
#   backup PATH FILE       existed: restored from FILE
#   moved  PATH TO         the original legacy hook, moved to TO: moved back

record() {
	local IFS=$'\t'
	printf '%s\n' "$*" >>"$MANIFEST"
}

# known PATH: the manifest already accounts for PATH.
known() {
	[[ -f $MANIFEST ]] && awk -F'\t' -v p="$1" '$1 != "mode" && $2 == p { f = 1 } END { exit !f }' "$MANIFEST"
}

manifest_mode() {
	[[ -f $MANIFEST ]] && awk -F'\t' '$1 == "mode" { print $2; exit }' "$MANIFEST"
}

# mkdirs DIR: create DIR and its missing parents, recording each one.
mkdirs() {
	local d=$1 missing=()
	while [[ -n $d && $d != / && ! -d $d ]]; do
		missing=("$d" "${missing[@]}")
		d=$(dirname "$d")
	done
	for d in "${missing[@]}"; do
		mkdir -m 0755 "$d"
		known "$d" || record dir "$d"
	done
}

# remember PATH: before we write PATH for the first time, note what was there.
remember() {
	local p=$1 n
	known "$p" && return 0
	if [[ -e $p || -L $p ]]; then
		n=$(($(wc -l <"$MANIFEST") + 1))
		mkdir -p "$BACKUPS"
		cp -a "$p" "$BACKUPS/$n"
		record backup "$p" "$BACKUPS/$n"
	else
		record absent "$p"
	fi
}

# put SRC DST MODE: install SRC at DST atomically.
put() {
	local src=$1 dst=$2 mode=$3
	mkdirs "$(dirname "$dst")"
	remember "$dst"
	cp "$src" "$dst.rbdfence-tmp"
	chmod "$mode" "$dst.rbdfence-tmp"
	mv -f "$dst.rbdfence-tmp" "$dst"
}

# --- environment ------------------------------------------------------------

# libvirt_version prints the installed libvirt daemon's version, or nothing.
libvirt_version() {
	local b v
	for b in libvirtd virtqemud; do
		if command -v "$b" >/dev/null 2>&1; then
			v=$("$b" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n1 || true)
			if [[ -n $v ]]; then
				echo "$v"
				return 0
			fi
		fi
	done
}

# older_than_6_5 VERSION
older_than_6_5() {
	local major minor
	IFS=. read -r major minor _ <<<"$1"
	((major < 6 || (major == 6 && ${minor:-0} < 5)))
}

# any_hook: libvirtd would find a qemu hook (its startup check).
any_hook() {
	local f
	[[ -f $LEGACY_HOOK && -x $LEGACY_HOOK ]] && return 0
	for f in "$QEMU_D"/*; do
		[[ -f $f && -x $f ]] && return 0
	done
	return 1
}

source_binary() {
	local b
	if [[ -n ${RBDFENCE_BIN:-} ]]; then
		b=$RBDFENCE_BIN
		[[ -d $b ]] && b=$b/rbdfence-hook
	else
		b=$root/bin/rbdfence-hook
	fi
	[[ -f $b && -x $b ]] || die "hook binary $b not found: run 'make build' or set RBDFENCE_BIN"
	echo "$b"
}

# --- uninstall --------------------------------------------------------------

do_uninstall() {
	if [[ ! -f $MANIFEST ]]; then
		log "nothing to uninstall under ${PREFIX:-/}"
		return 0
	fi
	local kind a b
	while IFS=$'\t' read -r kind a b; do
		case $kind in
		absent) rm -f "$a" ;;
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
	local dirs
	dirs=$(awk -F'\t' '$1 == "dir" { print $2 }' "$MANIFEST" | tac)
	rm -rf "$STATE"
	# Directories we created, children first, if nothing else lives there.
	while IFS= read -r a; do
		if [[ -n $a && -d $a ]]; then
			rmdir "$a" 2>/dev/null || true
		fi
	done <<<"$dirs"
	log "uninstalled; restored what was there before"
}

# --- install ----------------------------------------------------------------

write_wrapper() {
	local dst=$1 tmp
	tmp=$(mktemp)
	{
		echo "#!/bin/sh"
		echo "$MARKER (installed by rbdfence install.sh host;"
		echo "# remove it with: install.sh host --uninstall)."
		echo "# libvirtd runs it as <domain> <op> <subop> <extra> with the domain XML on"
		echo "# stdin, a fixed argv and a minimal environment: the config path is set here."
		if [[ -n $CONFIG ]]; then
			echo "# Config: $CONFIG"
		else
			echo "# Config: /etc/one/rbdfence.yaml when present, built-in defaults otherwise."
		fi
		printf 'exec %s' "$(sq "$BIN_RUN")"
		[[ -n $CONFIG ]] && printf ' --config %s' "$(sq "$CONFIG")"
		[[ -n $DOMAINS ]] && printf ' --domains %s' "$(sq "$DOMAINS")"
		printf ' -- "$@"\n'
	} >"$tmp"
	put "$tmp" "$dst" 0755
	rm -f "$tmp"
}

write_chain() {
	local tmp
	tmp=$(mktemp)
	{
		echo "#!/bin/sh"
		echo "$MARKER chain for libvirt < 6.5 (installed by rbdfence"
		echo "# install.sh host --legacy; remove it with: install.sh host --uninstall)."
		echo "# Runs rbdfence's hook, then the hook that was here before (kept at"
		echo "# $ORIG) with the same argv and stdin. Like libvirt"
		echo "# with qemu.d/, every hook runs; the exit status is rbdfence's when it"
		echo "# failed, the original's otherwise. Only the original writes stdout."
		if [[ -n $CONFIG ]]; then
			echo "# Config: $CONFIG"
		else
			echo "# Config: /etc/one/rbdfence.yaml when present, built-in defaults otherwise."
		fi
		# $(cat; echo x) keeps trailing newlines; the x is cut off again.
		echo 'input=$(cat; echo x)'
		echo 'input=${input%x}'
		printf 'printf %%s "$input" | %s' "$(sq "$BIN_RUN")"
		[[ -n $CONFIG ]] && printf ' --config %s' "$(sq "$CONFIG")"
		[[ -n $DOMAINS ]] && printf ' --domains %s' "$(sq "$DOMAINS")"
		printf ' -- "$@" >/dev/null\n'
		echo 'rc=$?'
		printf 'orig=%s\n' "$(sq "$ORIG")"
		echo 'if [ -f "$orig" ] && [ -x "$orig" ]; then'
		echo '	printf %s "$input" | "$orig" "$@"'
		echo '	orc=$?'
		echo '	[ "$rc" -eq 0 ] && rc=$orc'
		echo 'fi'
		echo 'exit "$rc"'
	} >"$tmp"
	put "$tmp" "$LEGACY_HOOK" 0755
	rm -f "$tmp"
}

# lock_state creates the state directory (noting which directories it had
# to create in STATE_CREATED) and takes its lock.
STATE_CREATED=()
lock_state() {
	local d=$STATE
	STATE_CREATED=()
	while [[ -n $d && $d != / && ! -d $d ]]; do
		STATE_CREATED=("$d" "${STATE_CREATED[@]}")
		d=$(dirname "$d")
	done
	mkdir -p "$STATE"
	exec 9>"$STATE/lock"
	flock -w 60 9 || die "another install-host.sh holds $STATE/lock"
}

do_install() {
	local src="" mode had_hook=0 v
	if [[ -n $HOOK_BIN ]]; then
		[[ -x $PREFIX$HOOK_BIN ]] || die "--hook-bin $HOOK_BIN: $PREFIX$HOOK_BIN is not an executable"
	else
		src=$(source_binary)
	fi
	if ((LEGACY)); then
		mode=legacy
	else
		mode=qemu.d
		v=$(libvirt_version)
		if [[ -n $v ]] && older_than_6_5 "$v"; then
			log "libvirt $v runs only /etc/libvirt/hooks/qemu (qemu.d/ needs 6.5): installing the legacy chain"
			mode=legacy
		fi
	fi
	if [[ -n $CONFIG && ! -r $CONFIG ]]; then
		log "warning: config $CONFIG is not readable yet: RBD domains will not start until it is"
	fi
	any_hook && had_hook=1

	lock_state
	local prev
	prev=$(manifest_mode || true)
	if [[ -n $prev && $prev != "$mode" ]]; then
		log "switching from the $prev install to $mode"
		do_uninstall
		lock_state
		prev=""
	fi
	if [[ -z $prev ]]; then
		: >"$MANIFEST"
		record mode "$mode"
		local d
		for d in "${STATE_CREATED[@]}"; do
			record dir "$d"
		done
	fi

	[[ -z $src ]] || put "$src" "$BIN_DST" 0755
	if [[ $mode == qemu.d ]]; then
		write_wrapper "$ENTRY"
	else
		if ! known "$LEGACY_HOOK"; then
			if [[ -e $LEGACY_HOOK ]] && ! grep -qF "$MARKER" "$LEGACY_HOOK" 2>/dev/null; then
				[[ -e $ORIG ]] && die "$ORIG exists already: move it away first"
				mv "$LEGACY_HOOK" "$ORIG"
				record moved "$LEGACY_HOOK" "$ORIG"
				log "kept the existing hook as $ORIG; the chain calls it after rbdfence's"
			fi
		fi
		write_chain
	fi
	log "installed $BIN_RUN and $([[ $mode == qemu.d ]] && echo "$ENTRY" || echo "$LEGACY_HOOK (chain)")"
	if ((!had_hook)) && [[ -z $PREFIX ]] && pgrep -x 'libvirtd|virtqemud' >/dev/null 2>&1; then
		log "warning: libvirtd found no qemu hook when it started, so it will not run this one" \
			"until it is restarted (systemctl restart libvirtd)"
	fi
}

if ((UNINSTALL)); then
	if [[ -d $STATE ]]; then
		exec 9>"$STATE/lock"
		flock -w 60 9 || die "another install-host.sh holds $STATE/lock"
	fi
	do_uninstall
else
	do_install
fi
