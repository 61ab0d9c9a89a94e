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
#   DIR/var/lib/one/remotes/vmm/kvm/migrate-rbdfence     VMM local migrate action
#                                  (and <script>-rbdfence for an admin's local
#                                  migrate script such as migrate_local, which
#                                  it wraps)
#   DIR/var/lib/one/remotes/vmm/kvm/attach-rbdfence      VMM local attach_disk action
#   DIR/var/lib/one/remotes/rbdfence/rbdfence-host        the host-side binary
#                                  (onehost sync copies it to /var/tmp/one/rbdfence/)
#   DIR/var/lib/one/remotes/rbdfence/prestart            the start check, for admins
#   DIR/var/lib/one/remotes/rbdfence/onedconf-rbdfence   reads and edits VM_MAD ARGUMENTS
#   DIR/var/lib/one/remotes/hooks/rbdfence/fence_host.sh  the HA hook's fence:
#                                  runs rbdfence fence-host (OpenNebula's own
#                                  hooks/ft/ files are not touched)
#   DIR/var/lib/one/remotes/hooks/rbdfence/host_error.rb  a symlink to OpenNebula's
#                                  ../ft/host_error.rb, which runs the
#                                  fence_host.sh next to it (host_error.rb:50)
#   DIR/var/lib/one/remotes/hooks/rbdfence/host_error.hook  the onehook template
#   DIR/etc/one/rbdfence.yaml                            a default config, if none
#   DIR/etc/systemd/system/rbdfence-events.service       runs `rbdfence events flush`
#   DIR/etc/systemd/system/rbdfence-events.timer         as oneadmin every minute:
#                                  this front-end's spool and every KVM host's,
#                                  collected over OpenNebula's ssh (hosts hold no
#                                  oned credentials); enabled when systemd runs
#                                  here and there is no --prefix
# and prints the change of DIR/etc/one/oned.conf that makes every VM_MAD
# running the kvm driver (NAME "kvm", "qemu", ...) run the local actions
# (deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,
# attach_disk=attach-rbdfence, merged into the last -l list, the only one the driver reads); --apply
# makes that edit. A VM_MAD that cannot be covered is named, and --apply
# then changes nothing.
#
# OpenNebula's own files are not replaced: an earlier rbdfence's wrappers in
# tm/ceph/ are taken out again and OpenNebula's scripts put back.
#
# Idempotent: running it again updates the files in place. What it creates
# or edits is recorded in DIR/var/lib/rbdfence/install-frontend/, and
# --uninstall restores exactly what was there before (oned.conf byte for
# byte unless it was edited since; a config you edited is kept, and said so).
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
HOOKS=$REMOTES/hooks/rbdfence
ONED_CONF=$PREFIX/etc/one/oned.conf
CONFIG=$PREFIX/etc/one/rbdfence.yaml
STATE=$PREFIX/var/lib/rbdfence/install-frontend
CREATED=$STATE/created
UNITS=$PREFIX/etc/systemd/system
EVENTS_UNITS=(rbdfence-events.service rbdfence-events.timer)
TM_OPS=(premigrate postmigrate failmigrate)
OURS="deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence"
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

# fence_host_script: OpenNebula's HA hook (share/hooks/ft/host_error.rb:50
# and :207-212 in release-7.4.0) runs the fence_host.sh next to it with the
# host's XML, base64, on stdin, and reschedules only on exit 0.
fence_host_script() {
	cat <<'EOF'
#!/bin/bash
# rbdfence: the host fence of OpenNebula's HA hook (installed by install.sh
# frontend). host_error.rb pipes the failed host's XML, base64, on stdin;
# rbdfence fence-host re-reads the host from oned, refuses a host that is not
# in ERROR/OFFLINE or still reports, blocklists every Ceph client of its VMs
# and exits 0 only when that is complete. Needs Ceph access on this machine
# (ceph.* in /etc/one/rbdfence.yaml, a keyring readable by oneadmin).
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../rbdfence/rbdfence-host" fence-host "$@"
EOF
}

# host_error_hook: the onehook template that runs the HA hook from our
# directory (COMMAND is relative to remotes/hooks: src/hm/ExecuteHook.cc:41).
host_error_hook() {
	cat <<'EOF'
NAME            = host_error_rbdfence
TYPE            = state
COMMAND         = rbdfence/host_error.rb
ARGUMENTS       = "$TEMPLATE -m -p 2"
ARGUMENTS_STDIN = yes
RESOURCE        = HOST
STATE           = ERROR
REMOTE          = no
EOF
}

# The event delivery: `rbdfence events flush` as oneadmin (its ssh config
# and persistent connections to the hosts, as oned's drivers), one minute
# after the previous run ended, so that runs never overlap. A host that
# does not answer is cut after timeouts.ssh + timeouts.total.
events_service() {
	cat <<'EOF'
# rbdfence (written by install.sh frontend): delivers the collision events
# spooled on this front-end and on every KVM host to oned. Hosts hold no oned
# credentials: their spools are collected over oneadmin's ssh.
[Unit]
Description=rbdfence: deliver spooled collision events (front-end and KVM hosts) to oned
After=network-online.target opennebula.service

[Service]
Type=oneshot
User=oneadmin
ExecStart=/var/lib/one/remotes/rbdfence/rbdfence-host events flush
TimeoutStartSec=30min
EOF
}

events_timer() {
	cat <<'EOF'
# rbdfence (written by install.sh frontend): runs rbdfence-events.service
# one minute after its previous run ended.
[Unit]
Description=rbdfence: deliver spooled collision events every minute

[Timer]
OnBootSec=2min
OnUnitInactiveSec=1min
AccuracySec=10s

[Install]
WantedBy=timers.target
EOF
}

# systemd_live: systemctl manages the units here (no --prefix, systemd runs).
systemd_live() { [[ -z $PREFIX ]] && command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; }

# put_unit NAME DST: put_text for a systemd unit; a unit of the same name
# that is not ours is kept in the state directory and put back by
# --uninstall.
put_unit() {
	local fn=$1 dst=$2 keep
	keep=$STATE/units/$(basename "$dst").orig
	if [[ -e $dst || -L $dst ]] && ! grep -qxF -- "$dst" "$CREATED" && [[ ! -e $keep ]]; then
		mkdir -p "$STATE/units"
		cp -a "$dst" "$keep"
		log "$dst existed: kept in $keep, put back by --uninstall"
	fi
	put_text "$fn" "$dst" 0644
}

# put_text NAME DST MODE: write the output of function NAME as DST.
put_text() {
	local fn=$1 dst=$2 mode=$3
	[[ -e $dst || -L $dst ]] || record "$dst"
	"$fn" >"$dst.rbdfence-new"
	chmod "$mode" "$dst.rbdfence-new"
	chown --reference="$(dirname "$dst")" "$dst.rbdfence-new" 2>/dev/null || true
	mv -f "$dst.rbdfence-new" "$dst"
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

# oned_plan: plans the oned.conf change with onedconf-rbdfence (reading
# ARGUMENTS as the VMM driver does). Sets PLAN_FILE (the new content),
# PLAN_REPORT (its report) and PLAN_WRAP (local migrate scripts to wrap);
# status 3 when some VM_MAD running the kvm driver cannot be covered.
oned_plan() {
	[[ -f $ONED_CONF ]] || {
		echo "no $ONED_CONF" >&2
		return 3
	}
	PLAN_FILE=$(mktemp)
	PLAN_REPORT=$(mktemp)
	trap 'rm -f "$PLAN_FILE" "$PLAN_REPORT"' EXIT
	local rc=0
	"$bindir/onedconf-rbdfence" plan "$ONED_CONF" >"$PLAN_FILE" 2>"$PLAN_REPORT" || rc=$?
	PLAN_WRAP=$(sed -n 's/^wrap: //p' "$PLAN_REPORT")
	if [[ $rc != 0 ]]; then
		sed -n 's/^problem: //p' "$PLAN_REPORT" >&2
		[[ $rc == 3 ]] || cat "$PLAN_REPORT" >&2
		return 3
	fi
	if ! grep -q '^change: \|^covered: ' "$PLAN_REPORT"; then
		echo "no VM_MAD in $ONED_CONF runs the kvm driver (EXECUTABLE one_vmm_exec, hypervisor kvm)" >&2
		return 3
	fi
}

# write_like FILE SRC: replace FILE's content with SRC's, keeping FILE's
# mode and owner, atomically.
write_like() {
	local f=$1 src=$2 tmp
	tmp=$(mktemp "$f.rbdfence-XXXXXX")
	cat "$src" >"$tmp"
	chmod --reference="$f" "$tmp"
	chown --reference="$f" "$tmp" 2>/dev/null || true
	mv -f "$tmp" "$f"
}

# --------------------------------------------------------------- install --

install_frontend() {
	local b
	for b in deploy-rbdfence restore-rbdfence migrate-rbdfence attach-rbdfence prestart onedconf-rbdfence; do
		[[ -x $bindir/$b ]] || die "$bindir/$b not found: run 'make build' or set RBDFENCE_BIN"
	done
	[[ -x $rbdfence_bin ]] || die "$rbdfence_bin not found: run 'make build' or set RBDFENCE_BIN"
	[[ -d $VMM ]] || die "$VMM not found: is this an OpenNebula front-end (use --prefix for a test tree)?"

	# Plan the oned.conf change first: --apply must not leave a half install.
	local why="" restart=0 errf planned=0
	errf=$(mktemp)
	if oned_plan 2>"$errf"; then
		planned=1
	else
		why=$(cat "$errf")
		if [[ $APPLY == 1 ]]; then
			rm -f "$errf"
			die "--apply: oned.conf cannot be changed safely: $(echo "$why" | tr '\n' ' ')(nothing was installed)"
		fi
	fi
	rm -f "$errf"

	init_state

	# VMM local actions; the migrate action also under the name of every
	# local migrate script of the admin's that it wraps.
	put "$bindir/deploy-rbdfence" "$VMM/deploy-rbdfence"
	put "$bindir/restore-rbdfence" "$VMM/restore-rbdfence"
	put "$bindir/migrate-rbdfence" "$VMM/migrate-rbdfence"
	put "$bindir/attach-rbdfence" "$VMM/attach-rbdfence"
	local w
	for w in ${PLAN_WRAP:-}; do
		[[ -x $VMM/$w ]] || log "WARNING: the local migrate script vmm/kvm/$w that oned.conf names is missing: migrations will fail until it is back"
		put "$bindir/migrate-rbdfence" "$VMM/$w-rbdfence"
	done

	# An earlier rbdfence replaced OpenNebula's tm/ceph migrate scripts with
	# wrappers: put OpenNebula's back (migration is now a VMM local action).
	local op orig
	for op in "${TM_OPS[@]}"; do
		orig=$TM/$op.rbdfence-orig
		[[ -e $orig ]] || continue
		if grep -qxF "$orig" "$CREATED" 2>/dev/null; then
			rm -f "$orig" # a no-op stub an earlier install made
			is_ours "$TM/$op" && rm -f "$TM/$op"
			unrecord "$orig"
		elif [[ -e $TM/$op ]] && ! is_ours "$TM/$op"; then
			log "tm/ceph/$op is OpenNebula's (upgrade?): removed the stale $orig"
			rm -f "$orig"
		else
			mv -f "$orig" "$TM/$op"
			log "tm/ceph/$op: OpenNebula's script is back in place (rbdfence no longer wraps it)"
		fi
	done

	# The host-side binary, the prestart driver, the oned.conf tool.
	ensure_dir "$RBD"
	put "$rbdfence_bin" "$RBD/rbdfence-host"
	put "$bindir/prestart" "$RBD/prestart"
	put "$bindir/onedconf-rbdfence" "$RBD/onedconf-rbdfence"

	# The HA hook's fence (HA without a BMC): our directory next to
	# OpenNebula's hooks/ft, which stays as it is.
	ensure_dir "$HOOKS"
	put_text fence_host_script "$HOOKS/fence_host.sh" 0755
	put_text host_error_hook "$HOOKS/host_error.hook" 0644
	if [[ ! -L $HOOKS/host_error.rb ]]; then
		[[ -e $HOOKS/host_error.rb ]] && die "$HOOKS/host_error.rb exists and is not our symlink: move it away, then run this again"
		ln -s ../ft/host_error.rb "$HOOKS/host_error.rb"
		record "$HOOKS/host_error.rb"
	fi
	[[ -e $REMOTES/hooks/ft/host_error.rb ]] || log "no $REMOTES/hooks/ft/host_error.rb (OpenNebula's HA hook): the host fence is installed but cannot run before it is there"

	# A default config if there is none.
	if [[ ! -e $CONFIG ]]; then
		ensure_dir "$(dirname "$CONFIG")"
		default_config >"$CONFIG.rbdfence-new"
		chmod 0644 "$CONFIG.rbdfence-new"
		mv -f "$CONFIG.rbdfence-new" "$CONFIG"
		record "$CONFIG"
		log "wrote a default config $CONFIG"
	fi

	# The event delivery's timer.
	ensure_dir "$UNITS"
	put_unit events_service "$UNITS/rbdfence-events.service"
	put_unit events_timer "$UNITS/rbdfence-events.timer"
	local timer_on=0
	if systemd_live; then
		if systemctl daemon-reload && systemctl enable --now rbdfence-events.timer >/dev/null 2>&1; then
			timer_on=1
			log "rbdfence-events.timer enabled: spooled events (here and on the KVM hosts) reach oned every minute"
		else
			log "WARNING: could not enable rbdfence-events.timer: run 'systemctl enable --now rbdfence-events.timer'"
		fi
	fi

	# oned.conf.
	if [[ $planned == 1 ]]; then
		if cmp -s "$ONED_CONF" "$PLAN_FILE"; then
			log "oned.conf: every VM_MAD running the kvm driver already runs the rbdfence local actions ($(sed -n 's/^covered: //p' "$PLAN_REPORT" | paste -sd, -))"
		elif [[ $APPLY == 1 ]]; then
			if [[ ! -f $STATE/oned.conf.orig ]]; then
				if [[ -f $STATE/oned.line.orig && -f $STATE/oned.line.new ]]; then
					# An earlier install changed one line: the original is
					# today's file with that line as it was.
					local n
					n=$(grep -nxF -- "$(cat "$STATE/oned.line.new")" "$ONED_CONF" | head -1 | cut -d: -f1)
					if [[ -n $n ]]; then
						awk -v n="$n" -v f="$STATE/oned.line.orig" 'NR == n { while ((getline l < f) > 0) print l; next } { print }' "$ONED_CONF" >"$STATE/oned.conf.orig"
					else
						cp "$ONED_CONF" "$STATE/oned.conf.orig"
					fi
					rm -f "$STATE/oned.line.orig" "$STATE/oned.line.new"
				else
					cp "$ONED_CONF" "$STATE/oned.conf.orig"
				fi
			fi
			write_like "$ONED_CONF" "$PLAN_FILE"
			cp "$ONED_CONF" "$STATE/oned.conf.new"
			restart=1
			log "oned.conf: VM_MAD ARGUMENTS changed ($(sed -n 's/^change: //p' "$PLAN_REPORT" | paste -sd, -)):"
			sed -n 's/^\([-+]\)[[:space:]]*/  \1 /p' "$PLAN_REPORT" >&2
		else
			echo "Change the VM_MAD(s) running the kvm driver in $ONED_CONF, or run again with --apply:"
			sed -n 's/^\([-+]\)[[:space:]]*/  \1 /p' "$PLAN_REPORT"
			restart=1
		fi
	else
		restart=1
		echo "oned.conf was not changed, and these VM_MADs get NO rbdfence protection:"
		printf '%s\n' "$why" | sed 's/^/  - /'
		echo "Add the local actions to their ARGUMENTS by hand: -l $OURS"
		echo "(merged into the last -l list: the driver reads only the last -l option)."
	fi
	rm -f "${PLAN_FILE:-}" "${PLAN_REPORT:-}"

	echo "Next steps:"
	[[ $restart == 0 ]] || echo "  - restart oned (systemctl restart opennebula) after the VM_MAD change"
	echo "  - run 'onehost sync --force' as oneadmin: it copies rbdfence-host to /var/tmp/one/rbdfence/ on every host"
	echo "  - on every KVM host: install.sh host (the libvirt hook; hosts need no oned credentials)"
	[[ $timer_on == 1 ]] || echo "  - enable the delivery of spooled events (here and on the hosts): systemctl enable --now rbdfence-events.timer"
	echo "  - check with 'rbdfence doctor --role frontend'"
	echo "  - optional, HA without a BMC (README: Host failure): give this front-end Ceph access, then"
	echo "    as oneadmin: onehook create $HOOKS/host_error.hook"
}

# ------------------------------------------------------------- uninstall --

uninstall_frontend() {
	[[ -d $STATE ]] || {
		log "nothing to uninstall ($STATE not found)"
		return 0
	}
	# oned.conf: byte for byte what was there, unless it was edited since.
	if [[ -f $STATE/oned.conf.orig && -f $ONED_CONF ]]; then
		if cmp -s "$ONED_CONF" "$STATE/oned.conf.new"; then
			write_like "$ONED_CONF" "$STATE/oned.conf.orig"
			log "oned.conf: restored as it was before the install; restart oned"
		else
			local tool=$RBD/onedconf-rbdfence tmp
			[[ -x $tool ]] || tool=$bindir/onedconf-rbdfence
			tmp=$(mktemp)
			if [[ -x $tool ]] && "$tool" remove "$ONED_CONF" >"$tmp" && ! cmp -s "$tmp" "$ONED_CONF"; then
				write_like "$ONED_CONF" "$tmp"
				log "oned.conf: edited since the install; removed only the rbdfence local actions; restart oned"
			else
				log "oned.conf: edited since the install and carries no rbdfence local actions: left as is"
			fi
			rm -f "$tmp"
		fi
	elif [[ -f $STATE/oned.line.orig && -f $ONED_CONF ]]; then
		# An install by an earlier rbdfence: one line changed.
		local n
		n=$(grep -nxF -- "$(cat "$STATE/oned.line.new")" "$ONED_CONF" | head -1 | cut -d: -f1)
		if [[ -n $n ]]; then
			awk -v n="$n" -v f="$STATE/oned.line.orig" 'NR == n { while ((getline l < f) > 0) print l; next } { print }' "$ONED_CONF" >"$STATE/oned.tmp"
			write_like "$ONED_CONF" "$STATE/oned.tmp"
			log "oned.conf: kvm VM_MAD ARGUMENTS restored; restart oned"
		fi
	elif [[ -f $ONED_CONF ]] && grep -qF -- "-rbdfence" "$ONED_CONF"; then
		log "oned.conf still runs rbdfence local actions (added by hand?): remove them from the VM_MAD ARGUMENTS and restart oned"
	fi

	# The event delivery's timer: stopped, then its units go with the other
	# files we created; a unit of the same name that was there goes back.
	if systemd_live; then
		systemctl disable --now rbdfence-events.timer >/dev/null 2>&1 || true
	fi
	local u
	for u in "${EVENTS_UNITS[@]}"; do
		if [[ -e $STATE/units/$u.orig || -L $STATE/units/$u.orig ]]; then
			rm -f "$UNITS/$u"
			mv -f "$STATE/units/$u.orig" "$UNITS/$u"
		fi
	done

	# TM: originals an earlier rbdfence kept go back in place.
	local op orig
	for op in "${TM_OPS[@]}"; do
		orig=$TM/$op.rbdfence-orig
		[[ -e $orig ]] || continue
		if [[ -e $TM/$op ]] && ! is_ours "$TM/$op"; then
			rm -f "$orig"
			continue
		fi
		if grep -qxF "$orig" "$CREATED" 2>/dev/null; then
			rm -f "$orig" "$TM/$op"
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
	if systemd_live; then
		systemctl daemon-reload || true
	fi
	log "uninstalled; restart oned if its VM_MAD was changed. The copies under /var/tmp/one/rbdfence on hosts are no longer used"
}

if [[ $UNINSTALL == 1 ]]; then
	uninstall_frontend
else
	install_frontend
fi
