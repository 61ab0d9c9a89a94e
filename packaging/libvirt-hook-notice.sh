# libvirt_hook_notice HOOKS [PID]: say whether the running libvirt daemon
# (PID, else the oldest libvirtd or virtqemud) will run a qemu hook that is
# about to be put into HOOKS (/etc/libvirt/hooks). Call it before the hook is
# written. POSIX sh: install.sh host sources it, package.sh puts it into the
# rbdfence-host pre-install.
#
# libvirt decides once, at its start, whether it runs qemu hooks at all: only
# when HOOKS/qemu or an executable in HOOKS/qemu.d/ existed then
# (virHookInitialize). So, with the daemon's start time (ps etimes, whole
# seconds: one second of margin):
#   - a hook that is older than the start is there: the daemon runs hooks,
#     nothing to say;
#   - else, if nothing in HOOKS changed since the start, none existed then:
#     the daemon will not run the new hook until it is restarted (a fact);
#   - else a hook may have existed and gone since: it may not (said so).
libvirt_hook_notice() {
	_lhn_dir=$1
	_lhn_pid=${2:-}
	if [ -z "$_lhn_pid" ]; then
		_lhn_pid=$(pgrep -o -x 'libvirtd|virtqemud' 2>/dev/null) || return 0
	fi
	_lhn_name=$(ps -o comm= -p "$_lhn_pid" 2>/dev/null)
	[ -n "$_lhn_name" ] || return 0
	# ps can answer an elapsed time longer than the machine's uptime (seen
	# once: "running since 1896"): such an answer is asked again, and judged
	# on only when it is possible.
	for _lhn_try in 1 2 3; do
		_lhn_up=$(ps -o etimes= -p "$_lhn_pid" 2>/dev/null | tr -d ' ')
		[ -n "$_lhn_up" ] || return 0
		_lhn_boot=$(cut -d. -f1 /proc/uptime 2>/dev/null) || _lhn_boot=
		[ -z "$_lhn_boot" ] || [ "$_lhn_up" -le "$((_lhn_boot + 1))" ] && break
		_lhn_up=
		sleep 1
	done
	if [ -z "$_lhn_up" ]; then
		echo "WARNING: cannot tell when $_lhn_name (pid $_lhn_pid) started (ps gives more than the uptime), so whether it will run rbdfence's qemu hook: systemctl restart $_lhn_name to be sure"
		return 0
	fi
	_lhn_start=$(($(date +%s) - _lhn_up - 1))
	for _lhn_f in "$_lhn_dir/qemu" "$_lhn_dir"/qemu.d/*; do
		if [ -f "$_lhn_f" ] && [ -x "$_lhn_f" ] && [ "$(stat -c %Z "$_lhn_f")" -lt "$_lhn_start" ]; then
			return 0
		fi
	done
	_lhn_since=$(date -d "@$((_lhn_start + 1))" '+%Y-%m-%d %H:%M:%S')
	for _lhn_f in "$_lhn_dir" "$_lhn_dir/qemu" "$_lhn_dir/qemu.d" "$_lhn_dir"/qemu.d/*; do
		if [ -e "$_lhn_f" ] && [ "$(stat -c %Z "$_lhn_f")" -ge "$_lhn_start" ]; then
			echo "WARNING: $_lhn_name (running since $_lhn_since) may not run rbdfence's qemu hook until it is restarted: no qemu hook is older than its start, and $_lhn_f changed since (systemctl restart $_lhn_name)"
			return 0
		fi
	done
	echo "WARNING: $_lhn_name (running since $_lhn_since) found no qemu hook when it started (nothing in $_lhn_dir changed since), so it will not run rbdfence's hook until it is restarted: systemctl restart $_lhn_name"
}
