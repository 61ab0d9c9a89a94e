#!/usr/bin/env bash
# rbdfence front-end part: the OpenNebula drivers on the front-end.
#
#   install.sh frontend [--prefix DIR] [--apply]
#   install.sh frontend [--prefix DIR] --uninstall
#
# Installs (binaries from ./bin after `make build`, or $RBDFENCE_BIN: a
# directory holding them, or the rbdfence binary whose directory holds the
# drivers)
#   DIR/var/lib/one/remotes/vmm/kvm/deploy-rbdfence      VMM local deploy action
#   DIR/var/lib/one/remotes/vmm/kvm/restore-rbdfence     VMM local restore action
#   DIR/var/lib/one/remotes/tm/ceph/{pre,post,fail}migrate
#                                  wrappers; the Ceph TM's own scripts are kept
#                                  as <name>.rbdfence-orig and always called
#   DIR/var/lib/one/remotes/rbdfence/rbdfence-host        the host-side binary
#                                  (onehost sync copies it to /var/tmp/one/rbdfence/)
#   DIR/var/lib/one/remotes/rbdfence/prestart            the start check, for admins
#   DIR/etc/one/rbdfence.yaml                            a default config, if none
# and prints the change of the kvm VM_MAD ARGUMENTS in DIR/etc/one/oned.conf
# that enables the wrappers (-l deploy=deploy-rbdfence,restore=restore-rbdfence,
# keeping any -l entries already there); --apply makes that edit.
#
# Idempotent: running it again updates the files in place (and, after an
# OpenNebula upgrade put a new upstream TM script where our wrapper was,
# keeps that one as the original). What it creates or edits is recorded in
# DIR/var/lib/rbdfence/install-frontend/, and --uninstall restores exactly
# what was there before (a config you edited is kept, and said so).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

PREFIX=""
APPLY=0
UNINSTALL=0

usage() {
	echo "usage: install.sh frontend [--prefix DIR] [--apply] [--uninstall]" >&2
	exit 2
}
log() { echo "install-frontend: $*" >&2; }
die() {
	echo "install-frontend: ERROR: $*" >&2
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
	--apply)
		APPLY=1
		shift
		;;
	--uninstall)
		UNINSTALL=1
		shift
		;;
	-h | --help) usage ;;
	*)
		echo "install-frontend: unknown argument '$1'" >&2
		usage
		;;
	esac
done
if [[ -n $PREFIX ]]; then
	mkdir -p "$PREFIX"
	PREFIX=$(cd "$PREFIX" && pwd)
fi

REMOTES=$PREFIX/var/lib/one/remotes
VMM=$REMOTES/vmm/kvm
TM=$REMOTES/tm/ceph
RBD=$REMOTES/rbdfence
ONED_CONF=$PREFIX/etc/one/oned.conf
CONFIG=$PREFIX/etc/one/rbdfence.yaml
STATE=$PREFIX/var/lib/rbdfence/install-frontend
CREATED=$STATE/created
TM_OPS=(premigrate postmigrate failmigrate)
OURS="deploy=deploy-rbdfence,restore=restore-rbdfence"
# Our Go binaries carry this import path (also when stripped).
MARK="rbdfence/rbdfence/internal/frontend"

is_ours() { [[ -f $1 ]] && grep -qaF "$MARK" "$1"; }

default_config() {
	cat <<'EOF'
# rbdfence configuration, written by install.sh frontend. Every key and its
# default is in the README's configuration reference; unknown keys are errors.
opennebula:
  # Where the Ceph check runs: ssh (on the VM's host, as OpenNebula's own
  # Ceph drivers do) or local (this front-end has Ceph access).
  remote: ssh
fence:
  # false: refuse a start when the check cannot be done (Ceph, ssh or oned
  # unreachable). true: log it and let the start go on.
  fail_open: false
EOF
}

# ---------------------------------------------------------------- state ---

# record PATH: remember that we created PATH (file or directory).
record() {
	grep -qxF -- "$1" "$CREATED" 2>/dev/null || printf '%s\n' "$1" >>"$CREATED"
}

# unrecord PATH: PATH is no longer ours to remove.
unrecord() {
	local tmp
	tmp=$(mktemp "$CREATED.XXXXXX")
	grep -vxF -- "$1" "$CREATED" >"$tmp" || true
	mv -f "$tmp" "$CREATED"
}

# ensure_dir DIR: create DIR and its missing parents, recording each.
ensure_dir() {
	local d=$1 missing=()
	while [[ ! -d $d ]]; do
		missing=("$d" "${missing[@]}")
		d=$(dirname "$d")
	done
	local m
	for m in "${missing[@]}"; do
		mkdir "$m"
		[[ -d $STATE ]] && record "$m"
	done
	return 0
}

init_state() {
	if [[ ! -d $STATE ]]; then
		local d=$STATE missing=()
		while [[ ! -d $d ]]; do
			missing=("$d" "${missing[@]}")
			d=$(dirname "$d")
		done
		mkdir -p "$STATE"
		: >"$CREATED"
		local m
		for m in "${missing[@]}"; do record "$m"; done
	fi
}

# put SRC DST: install SRC as DST (mode 0755, owner of DST's directory),
# atomically; a DST that did not exist is recorded as ours.
put() {
	local src=$1 dst=$2
	[[ -e $dst ]] || record "$dst"
	install -m 0755 "$src" "$dst.rbdfence-new"
	chown --reference="$(dirname "$dst")" "$dst.rbdfence-new" 2>/dev/null || true
	mv -f "$dst.rbdfence-new" "$dst"
}

# --------------------------------------------------------------- binaries --

bindir=$root/bin
rbdfence_bin=$root/bin/rbdfence
if [[ -n ${RBDFENCE_BIN:-} ]]; then
	if [[ -d $RBDFENCE_BIN ]]; then
		bindir=$RBDFENCE_BIN
		rbdfence_bin=$RBDFENCE_BIN/rbdfence
	else
		rbdfence_bin=$RBDFENCE_BIN
		bindir=$(dirname "$RBDFENCE_BIN")
	fi
fi

# ------------------------------------------------------------- oned.conf --

# kvm_args_line FILE: the line number of ARGUMENTS in the VM_MAD block whose
# NAME is "kvm" (empty if none).
kvm_args_line() {
	awk '
		/^[[:space:]]*VM_MAD[[:space:]]*=[[:space:]]*\[/ { inb = 1; kvm = 0; arg = 0; next }
		inb && /^[[:space:]]*NAME[[:space:]]*=[[:space:]]*"kvm"/ { kvm = 1 }
		inb && /^[[:space:]]*ARGUMENTS[[:space:]]*=/ { arg = NR }
		inb && /\]/ { if (kvm && arg) { print arg; exit } inb = 0 }
	' "$1"
}

# new_arguments VALUE: prints VALUE with our local actions added to its -l
# list (or a new -l), or fails (status 3) when it cannot be done safely.
new_arguments() {
	local v=$1 list
	if [[ $v =~ (^|[[:space:]])(-l|--local)([[:space:]]+|=)([^[:space:]\"]+) ]]; then
		list=${BASH_REMATCH[4]}
		local item name add=""
		local -a items
		IFS=, read -r -a items <<<"$list"
		for item in "${items[@]}"; do
			name=${item%%=*}
			name=${name,,}
			name=${name//[[:space:]]/}
			case $name in
			deploy) [[ $item == deploy=deploy-rbdfence ]] || {
				echo "the kvm VM_MAD already has a local deploy action ($item)" >&2
				return 3
			} ;;
			restore) [[ $item == restore=restore-rbdfence ]] || {
				echo "the kvm VM_MAD already has a local restore action ($item)" >&2
				return 3
			} ;;
			esac
		done
		[[ ,$list, == *,deploy=deploy-rbdfence,* ]] || add+=",deploy=deploy-rbdfence"
		[[ ,$list, == *,restore=restore-rbdfence,* ]] || add+=",restore=restore-rbdfence"
		local before=${BASH_REMATCH[0]}
		printf '%s\n' "${v/"$before"/"$before$add"}"
		return 0
	fi
	if [[ $v =~ (^|[[:space:]])(-l|--local) ]]; then
		echo "cannot read the -l option in ARGUMENTS \"$v\"" >&2
		return 3
	fi
	printf '%s\n' "$v -l $OURS"
}

# oned_change: prints the ARGUMENTS line before and after, or explains why
# it cannot be changed automatically (status 3).
oned_plan() {
	[[ -f $ONED_CONF ]] || {
		echo "no $ONED_CONF" >&2
		return 3
	}
	local n line value newv
	n=$(kvm_args_line "$ONED_CONF")
	[[ -n $n ]] || {
		echo "no VM_MAD with NAME = \"kvm\" and an ARGUMENTS line in $ONED_CONF" >&2
		return 3
	}
	line=$(sed -n "${n}p" "$ONED_CONF")
	[[ $line =~ ^([^\"]*\")([^\"]*)(\".*)$ ]] || {
		echo "cannot read the ARGUMENTS line $n of $ONED_CONF: $line" >&2
		return 3
	}
	local pre=${BASH_REMATCH[1]} post=${BASH_REMATCH[3]}
	value=${BASH_REMATCH[2]}
	newv=$(new_arguments "$value") || return 3
	PLAN_LINE_NO=$n
	PLAN_OLD=$line
	PLAN_NEW=$pre$newv$post
}

# replace_line FILE N TEXT: replace line N of FILE by TEXT, keeping the file's
# mode and owner.
replace_line() {
	local f=$1 n=$2 text=$3 tmp
	tmp=$(mktemp "$f.rbdfence-XXXXXX")
	awk -v n="$n" -v t="$text" 'NR == n { print t; next } { print }' "$f" >"$tmp"
	chmod --reference="$f" "$tmp"
	chown --reference="$f" "$tmp" 2>/dev/null || true
	mv -f "$tmp" "$f"
}

# --------------------------------------------------------------- install --

install_frontend() {
	local b
	for b in deploy-rbdfence restore-rbdfence premigrate postmigrate failmigrate prestart; do
		[[ -x $bindir/$b ]] || die "$bindir/$b not found: run 'make build' or set RBDFENCE_BIN"
	done
	[[ -x $rbdfence_bin ]] || die "$rbdfence_bin not found: run 'make build' or set RBDFENCE_BIN"
	[[ -d $VMM ]] || die "$VMM not found: is this an OpenNebula front-end (use --prefix for a test tree)?"
	[[ -d $TM ]] || die "$TM not found: the Ceph TM driver is not installed"

	# Plan the oned.conf change first: --apply must not leave a half install.
	local why restart=0 errf planned=0
	errf=$(mktemp)
	if oned_plan 2>"$errf"; then
		planned=1
	else
		why=$(tr '\n' ' ' <"$errf")
		[[ $APPLY == 1 ]] && {
			rm -f "$errf"
			die "--apply: oned.conf cannot be changed: $why(nothing was installed)"
		}
	fi
	rm -f "$errf"

	init_state

	# VMM local actions.
	put "$bindir/deploy-rbdfence" "$VMM/deploy-rbdfence"
	put "$bindir/restore-rbdfence" "$VMM/restore-rbdfence"

	# TM wrappers; the originals are kept and always called.
	local op orig
	for op in "${TM_OPS[@]}"; do
		orig=$TM/$op.rbdfence-orig
		if [[ -e $TM/$op ]] && ! is_ours "$TM/$op"; then
			if [[ -e $orig ]]; then
				log "tm/ceph/$op was replaced by a new upstream script (OpenNebula upgrade?): keeping it as the original"
				unrecord "$orig" # an upstream script now, not our stub
			fi
			mv -f "$TM/$op" "$orig"
		elif [[ ! -e $TM/$op ]] && [[ ! -e $orig ]]; then
			# No upstream script (older OpenNebula): a no-op original.
			printf '#!/bin/bash\n# rbdfence: stub original (there was no tm/ceph/%s)\nexit 0\n' "$op" >"$orig.rbdfence-new"
			chmod 0755 "$orig.rbdfence-new"
			mv -f "$orig.rbdfence-new" "$orig"
			record "$orig"
		elif [[ ! -e $orig ]]; then
			die "tm/ceph/$op is our wrapper but its original $orig is gone: restore OpenNebula's tm/ceph/$op as $orig, then run this again"
		fi
		# The wrapper replaces the original's place; it is not "created" by us
		# when an original was moved away (uninstall moves that back).
		if [[ -e $TM/$op ]]; then
			put "$bindir/$op" "$TM/$op"
		else
			install -m 0755 "$bindir/$op" "$TM/$op.rbdfence-new"
			chown --reference="$TM" "$TM/$op.rbdfence-new" 2>/dev/null || true
			mv -f "$TM/$op.rbdfence-new" "$TM/$op"
		fi
	done

	# The host-side binary and the prestart driver.
	ensure_dir "$RBD"
	put "$rbdfence_bin" "$RBD/rbdfence-host"
	put "$bindir/prestart" "$RBD/prestart"

	# A default config if there is none.
	if [[ ! -e $CONFIG ]]; then
		ensure_dir "$(dirname "$CONFIG")"
		default_config >"$CONFIG.rbdfence-new"
		chmod 0644 "$CONFIG.rbdfence-new"
		mv -f "$CONFIG.rbdfence-new" "$CONFIG"
		record "$CONFIG"
		log "wrote a default config $CONFIG"
	fi

	# oned.conf.
	if [[ $planned == 1 ]]; then
		if [[ $PLAN_OLD == "$PLAN_NEW" ]]; then
			log "oned.conf: the kvm VM_MAD already runs the rbdfence local actions"
		elif [[ $APPLY == 1 ]]; then
			[[ -f $STATE/oned.line.orig ]] || printf '%s\n' "$PLAN_OLD" >"$STATE/oned.line.orig"
			printf '%s\n' "$PLAN_NEW" >"$STATE/oned.line.new"
			replace_line "$ONED_CONF" "$PLAN_LINE_NO" "$PLAN_NEW"
			restart=1
			log "oned.conf: kvm VM_MAD ARGUMENTS changed (line $PLAN_LINE_NO):"
			log "  was: $(echo "$PLAN_OLD" | sed 's/^[[:space:]]*//')"
			log "  now: $(echo "$PLAN_NEW" | sed 's/^[[:space:]]*//')"
		else
			echo "Change the kvm VM_MAD in $ONED_CONF (line $PLAN_LINE_NO), or run again with --apply:"
			echo "  - $(echo "$PLAN_OLD" | sed 's/^[[:space:]]*//')"
			echo "  + $(echo "$PLAN_NEW" | sed 's/^[[:space:]]*//')"
			restart=1
		fi
	else
		restart=1
		echo "oned.conf was not changed: $why"
		echo "Add the local actions to the kvm VM_MAD ARGUMENTS by hand: -l $OURS"
		echo "(merged into an existing -l list; oned honours only the last -l option)."
	fi

	echo "Next steps:"
	[[ $restart == 0 ]] || echo "  - restart oned (systemctl restart opennebula) after the VM_MAD change"
	echo "  - run 'onehost sync --force' as oneadmin: it copies rbdfence-host to /var/tmp/one/rbdfence/ on every host"
	echo "  - on every KVM host: install.sh host (the libvirt hook)"
}

# ------------------------------------------------------------- uninstall --

uninstall_frontend() {
	[[ -d $STATE ]] || {
		log "nothing to uninstall ($STATE not found)"
		return 0
	}
	# oned.conf: put the original ARGUMENTS line back.
	if [[ -f $STATE/oned.line.orig && -f $ONED_CONF ]]; then
		local n cur orig new
		orig=$(cat "$STATE/oned.line.orig")
		new=$(cat "$STATE/oned.line.new")
		n=$(kvm_args_line "$ONED_CONF")
		cur=""
		[[ -n $n ]] && cur=$(sed -n "${n}p" "$ONED_CONF")
		if [[ -n $n && $cur == "$new" ]]; then
			replace_line "$ONED_CONF" "$n" "$orig"
			log "oned.conf: kvm VM_MAD ARGUMENTS restored; restart oned"
		elif [[ -n $n && $cur == *$OURS* ]]; then
			replace_line "$ONED_CONF" "$n" "$(printf '%s' "$cur" | sed -e "s/ -l $OURS//" -e "s/,$OURS//" -e 's/,deploy=deploy-rbdfence//' -e 's/,restore=restore-rbdfence//')"
			log "oned.conf: the ARGUMENTS line was edited since; removed only the rbdfence local actions; restart oned"
		else
			log "oned.conf: the kvm VM_MAD ARGUMENTS no longer carry the rbdfence actions: left as is"
		fi
	elif [[ -f $ONED_CONF ]] && grep -qF "$OURS" "$ONED_CONF"; then
		log "oned.conf still enables deploy-rbdfence/restore-rbdfence (added by hand?): remove '-l $OURS' from the kvm VM_MAD and restart oned"
	fi

	# TM: the originals go back in place.
	local op orig
	for op in "${TM_OPS[@]}"; do
		orig=$TM/$op.rbdfence-orig
		[[ -e $orig ]] || continue
		if [[ -e $TM/$op ]] && ! is_ours "$TM/$op"; then
			log "tm/ceph/$op is not our wrapper any more (upgrade?): left in place, $orig removed"
			rm -f "$orig"
			continue
		fi
		if grep -qxF "$orig" "$CREATED" 2>/dev/null; then
			rm -f "$orig" "$TM/$op" # a stub we made: there was no script
		else
			mv -f "$orig" "$TM/$op"
		fi
	done

	# Files and directories we created, newest first; an edited config stays.
	local p
	while IFS= read -r p; do
		[[ -n $p ]] || continue
		if [[ $p == "$CONFIG" && -f $p ]] && ! cmp -s "$p" <(default_config); then
			log "kept $p: it was edited since the install"
			continue
		fi
		if [[ -d $p && ! -L $p ]]; then
			[[ $p == "$STATE" || $STATE == "$p"/* ]] && continue # removed last
			rmdir "$p" 2>/dev/null || log "kept $p: not empty"
		else
			rm -f "$p"
		fi
	done < <(tac "$CREATED")

	# The state directory last, then its parents we created (deepest first).
	local parents=() i
	while IFS= read -r p; do
		[[ -n $p && $STATE == "$p"/* ]] && parents+=("$p")
	done <"$CREATED"
	rm -rf "$STATE"
	for ((i = ${#parents[@]} - 1; i >= 0; i--)); do
		rmdir "${parents[i]}" 2>/dev/null || log "kept ${parents[i]}: not empty"
	done
	log "uninstalled; restart oned if its VM_MAD was changed. The copies under /var/tmp/one/rbdfence on hosts are no longer used"
}

if [[ $UNINSTALL == 1 ]]; then
	uninstall_frontend
else
	install_frontend
fi
