#!/bin/bash
# rbdfence-onedconf: the one oned.conf change rbdfence needs, shown, made or
# undone. Every VM_MAD that runs OpenNebula's kvm driver (NAME "kvm", "qemu",
# ...) must run rbdfence's local actions
#   -l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence
# merged into its last -l list (the only one the driver reads).
#
#   rbdfence-onedconf [--prefix DIR]           show the change; nothing is written
#   rbdfence-onedconf [--prefix DIR] --apply   make it, then restart oned
#   rbdfence-onedconf [--prefix DIR] --undo    put oned.conf back as it was
#   rbdfence-onedconf [--prefix DIR] --check   can --apply cover every such VM_MAD?
#   rbdfence-onedconf [--prefix DIR] --adopt   only take over an earlier rbdfence's record
#
# The rbdfence-frontend package installs this script as
# /usr/sbin/rbdfence-onedconf: its post-install shows the change, its removal
# runs --undo. From a checkout, install.sh frontend [--apply | --uninstall]
# runs it. oned.conf is read as the VMM driver reads it, by
# onedconf-rbdfence (DIR/var/lib/one/remotes/rbdfence/, or --tool PATH).
#
# --apply keeps the file as it was in DIR/var/lib/rbdfence/oned-conf/;
# --undo restores it byte for byte, or, when oned.conf was edited since, takes
# only rbdfence's actions out. An admin's local migrate script named in
# ARGUMENTS (migrate=migrate_local) is wrapped: --apply links
# vmm/kvm/migrate_local-rbdfence to migrate-rbdfence, which runs it. A VM_MAD
# whose ARGUMENTS cannot be covered (another local deploy, restore or
# attach_disk) is named, and --apply then changes nothing.
#
# Exit codes: 0 done, or nothing to do; 1 error; 2 usage; 3 some VM_MAD that
# runs the kvm driver cannot be covered (named on stderr); 4 (without
# --apply) a change is needed, printed on stdout.
set -euo pipefail

PREFIX=""
TOOL=""
MODE=show

usage() {
	echo "usage: rbdfence-onedconf [--prefix DIR] [--tool PATH] [--apply | --undo | --check | --adopt]" >&2
	exit 2
}
log() { echo "rbdfence-onedconf: $*" >&2; }
die() {
	echo "rbdfence-onedconf: ERROR: $*" >&2
	exit 1
}

while [[ $# -gt 0 ]]; do
	case $1 in
	--prefix | --tool)
		[[ $# -ge 2 ]] || usage
		[[ $1 == --prefix ]] && PREFIX=$2 || TOOL=$2
		shift 2
		;;
	--apply | --undo | --check | --adopt)
		[[ $MODE == show ]] || usage
		MODE=${1#--}
		shift
		;;
	-h | --help) usage ;;
	*)
		echo "rbdfence-onedconf: unknown argument '$1'" >&2
		usage
		;;
	esac
done
[[ -z $PREFIX || -d $PREFIX ]] || die "--prefix $PREFIX is not a directory"
[[ -z $PREFIX ]] || PREFIX=$(cd "$PREFIX" && pwd)
[[ $PREFIX == / ]] && PREFIX=""

CONF=$PREFIX/etc/one/oned.conf
VMM=$PREFIX/var/lib/one/remotes/vmm/kvm
STATE=$PREFIX/var/lib/rbdfence/oned-conf
OLD=$PREFIX/var/lib/rbdfence/install-frontend # an rbdfence before the packages owned their files
TOOL=${TOOL:-$PREFIX/var/lib/one/remotes/rbdfence/onedconf-rbdfence}
OURS="deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence"
ACTIONS="deploy-rbdfence restore-rbdfence migrate-rbdfence attach-rbdfence"
MARK="rbdfence/rbdfence/internal/frontend" # in every front-end binary of ours
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# write_like FILE SRC: FILE gets SRC's content, keeping its mode and owner, atomically.
write_like() {
	local f=$1 src=$2 new
	new=$(mktemp "$f.rbdfence-XXXXXX")
	cat "$src" >"$new"
	chmod --reference="$f" "$new"
	chown --reference="$f" "$new" 2>/dev/null || true
	mv -f "$new" "$f"
}

# one_line_orig OUT: oned.conf as it was before an rbdfence that changed one
# ARGUMENTS line (and kept it in oned.line.orig / oned.line.new).
one_line_orig() {
	local n
	n=$(grep -nxF -- "$(cat "$STATE/oned.line.new")" "$CONF" | head -1 | cut -d: -f1)
	[[ -n $n ]] || return 1
	awk -v n="$n" -v f="$STATE/oned.line.orig" 'NR == n { while ((getline l < f) > 0) print l; next } { print }' "$CONF" >"$1"
}

# link_wrapper NAME: vmm/kvm/NAME-rbdfence runs migrate-rbdfence, which wraps NAME.
link_wrapper() {
	local w=$VMM/$1-rbdfence
	[[ -x $VMM/$1 ]] || log "WARNING: the local migrate script vmm/kvm/$1 that oned.conf names is missing: migrations will fail until it is back"
	if [[ ! -L $w || $(readlink "$w") != migrate-rbdfence ]]; then
		[[ ! -e $w || -L $w ]] || grep -qaF "$MARK" "$w" || die "$w exists and is not rbdfence's: move it away first"
		ln -sfn migrate-rbdfence "$w.rbdfence-new"
		mv -Tf "$w.rbdfence-new" "$w"
	fi
	mkdir -p "$STATE"
	grep -qxF -- "$w" "$STATE/links" 2>/dev/null || echo "$w" >>"$STATE/links"
}

# adopt_old_state: the oned.conf record of an rbdfence that installed its
# files by script moves here; the copies it made of migrate-rbdfence for
# wrapped local scripts become links.
adopt_old_state() {
	local f p
	for f in oned.conf.orig oned.conf.new oned.line.orig oned.line.new; do
		if [[ -f $OLD/$f && ! -e $STATE/$f ]]; then
			mkdir -p "$STATE"
			mv "$OLD/$f" "$STATE/$f"
		fi
	done
	[[ -f $OLD/created ]] || return 0
	local wraps
	wraps=$(grep -- '-rbdfence$' "$OLD/created" || true)
	while IFS= read -r p; do
		[[ -n $p ]] || continue
		case " $ACTIONS " in *" ${p##*/} "*) continue ;; esac
		[[ $p == "$VMM/"*-rbdfence && -f $p ]] && grep -qaF "$MARK" "$p" || continue
		f=${p##*/}
		link_wrapper "${f%-rbdfence}"
		grep -vxF -- "$p" "$OLD/created" >"$tmp/created" || true
		cat "$tmp/created" >"$OLD/created"
	done <<<"$wraps"
}

# plan: onedconf-rbdfence's plan of oned.conf: tmp/plan (the new file),
# tmp/report (its report); status 3 when some VM_MAD cannot be covered.
plan() {
	[[ -f $CONF ]] || {
		echo "no $CONF" >"$tmp/problems"
		return 3
	}
	[[ -x $TOOL ]] || die "$TOOL not found (the rbdfence-frontend package, or install.sh frontend, installs it)"
	local rc=0
	"$TOOL" plan "$CONF" >"$tmp/plan" 2>"$tmp/report" || rc=$?
	sed -n 's/^problem: //p' "$tmp/report" >"$tmp/problems"
	if [[ $rc != 0 && $rc != 3 ]]; then
		die "$TOOL plan $CONF failed: $(cat "$tmp/report")"
	fi
	if [[ $rc == 0 ]] && ! grep -q '^change: \|^covered: ' "$tmp/report"; then
		echo "no VM_MAD in $CONF runs the kvm driver (EXECUTABLE one_vmm_exec, hypervisor kvm)" >"$tmp/problems"
		rc=3
	fi
	return $rc
}

names() { sed -n "s/^$1: //p" "$tmp/report" | paste -sd, -; }
diff_lines() { sed -n 's/^\([-+]\)[[:space:]]*/  \1 /p' "$tmp/report"; }

uncovered() {
	echo "oned.conf was not changed, and these VM_MADs get NO rbdfence protection:"
	sed 's/^/  - /' "$tmp/problems"
	echo "Add the local actions to their ARGUMENTS by hand: -l $OURS"
	echo "(merged into the last -l list: the driver reads only the last -l option)."
}

do_show() {
	local rc=0
	plan || rc=$?
	if [[ $rc == 3 ]]; then
		uncovered
		return 3
	fi
	if cmp -s "$CONF" "$tmp/plan"; then
		log "oned.conf: every VM_MAD running the kvm driver already runs the rbdfence local actions ($(names covered))"
		return 0
	fi
	echo "Change the VM_MAD(s) running the kvm driver in $CONF:"
	diff_lines
	local w
	for w in $(sed -n 's/^wrap: //p' "$tmp/report"); do
		echo "  (and wrap the local migrate script $w: ln -s migrate-rbdfence $VMM/$w-rbdfence)"
	done
	return 4
}

do_apply() {
	local rc=0 w
	plan || rc=$?
	if [[ $rc == 3 ]]; then
		echo "oned.conf cannot be changed safely: $(tr '\n' ' ' <"$tmp/problems")" >&2
		return 3
	fi
	for w in $(sed -n 's/^wrap: //p' "$tmp/report"); do
		link_wrapper "$w"
	done
	if cmp -s "$CONF" "$tmp/plan"; then
		log "oned.conf: every VM_MAD running the kvm driver already runs the rbdfence local actions ($(names covered))"
		return 0
	fi
	mkdir -p "$STATE"
	if [[ ! -f $STATE/oned.conf.orig ]]; then
		if [[ -f $STATE/oned.line.orig && -f $STATE/oned.line.new ]] && one_line_orig "$tmp/orig"; then
			cp "$tmp/orig" "$STATE/oned.conf.orig"
		else
			cp "$CONF" "$STATE/oned.conf.orig"
		fi
		rm -f "$STATE/oned.line.orig" "$STATE/oned.line.new"
	fi
	write_like "$CONF" "$tmp/plan"
	cp "$CONF" "$STATE/oned.conf.new"
	log "oned.conf: VM_MAD ARGUMENTS changed ($(names change)); restart oned:"
	diff_lines >&2
}

do_undo() {
	local p
	if [[ -f $STATE/oned.conf.orig && -f $CONF ]]; then
		if cmp -s "$CONF" "$STATE/oned.conf.new"; then
			write_like "$CONF" "$STATE/oned.conf.orig"
			log "oned.conf: restored as it was before rbdfence; restart oned"
		elif [[ -x $TOOL ]] && "$TOOL" remove "$CONF" >"$tmp/removed" && ! cmp -s "$tmp/removed" "$CONF"; then
			write_like "$CONF" "$tmp/removed"
			log "oned.conf: edited since rbdfence changed it: took out only the rbdfence local actions; restart oned"
		else
			log "oned.conf: edited since rbdfence changed it, and runs no rbdfence local action: left as is"
		fi
	elif [[ -f $STATE/oned.line.orig && -f $CONF ]] && one_line_orig "$tmp/orig"; then
		write_like "$CONF" "$tmp/orig"
		log "oned.conf: kvm VM_MAD ARGUMENTS restored; restart oned"
	elif [[ -f $CONF ]] && grep -qF -- "-rbdfence" "$CONF"; then
		log "WARNING: $CONF still runs rbdfence local actions (added by hand?): take them out of the VM_MAD ARGUMENTS and restart oned"
	fi
	if [[ -f $STATE/links ]]; then
		while IFS= read -r p; do
			[[ -L $p && $(readlink "$p") == migrate-rbdfence ]] && rm -f "$p"
		done <"$STATE/links"
	fi
	rm -rf "$STATE"
}

adopt_old_state
case $MODE in
adopt) ;;
show) do_show ;;
apply) do_apply ;;
undo) do_undo ;;
check)
	rc=0
	plan || rc=$?
	[[ $rc == 0 ]] || sed 's/^/rbdfence-onedconf: /' "$tmp/problems" >&2
	exit $rc
	;;
esac
