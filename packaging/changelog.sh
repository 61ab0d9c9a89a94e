#!/usr/bin/env bash
# The packages' changelog of one build, made on purpose from CHANGELOG.md
# (the project's history, newest section first) rather than kept twice:
#
#   packaging/changelog.sh deb VERSION    debian/changelog format (changelog.Debian.gz)
#   packaging/changelog.sh rpm VERSION    the body of the spec's %changelog
#
# One entry, for VERSION-1: its items are the headings (###) of
# CHANGELOG.md's first section (its "- " items when it has no headings),
# after a line pointing to the whole text, which the packages carry
# (/usr/share/doc/rbdfence/changelog.gz, %doc CHANGELOG.md). The date is
# $SOURCE_DATE_EPOCH (package.sh: the last commit's time), the author
# $RBDFENCE_PKG_MAINTAINER.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
[[ $# == 2 && ($1 == deb || $1 == rpm) ]] || {
	echo "usage: packaging/changelog.sh deb|rpm VERSION" >&2
	exit 2
}
fmt=$1 version=$2
when=${SOURCE_DATE_EPOCH:?SOURCE_DATE_EPOCH is not set}
who=${RBDFENCE_PKG_MAINTAINER:-rbdfence maintainers <rbdfence@users.noreply.github.com>}

# items: the first section's headings, or its items, one per line.
items() {
	awk '
		/^## / { if (seen) exit; seen = 1; next }
		!seen { next }
		/^### / { sub(/^### +/, ""); h[++nh] = $0; next }
		/^- / { sub(/^- +/, ""); it[++ni] = $0 }
		END {
			if (nh) for (i = 1; i <= nh; i++) print h[i]
			else for (i = 1; i <= ni; i++) print it[i]
		}' "$src/CHANGELOG.md" | tr -d '`'
}

# entry LEAD INDENT: each item wrapped to 76 columns, LEAD before its first
# line, INDENT before the others.
entry() {
	local lead=$1 indent=$2 item
	{
		echo "rbdfence $version; every change: /usr/share/doc/rbdfence/$full"
		items
	} | while IFS= read -r item; do
		printf '%s\n' "$item" | fold -s -w 72 | sed -e "1s/^/$lead/" -e "1!s/^/$indent/" -e 's/[[:space:]]*$//'
	done
}

full=changelog.gz
[[ $fmt == rpm ]] && full=CHANGELOG.md
case $fmt in
deb)
	echo "rbdfence ($version-1) unstable; urgency=medium"
	echo
	entry '  * ' '    '
	echo
	echo " -- $who  $(LC_ALL=C date -u -d "@$when" '+%a, %d %b %Y %H:%M:%S +0000')"
	;;
rpm)
	echo "* $(LC_ALL=C date -u -d "@$when" '+%a %b %d %Y') $who - $version-1"
	entry '- ' '  '
	;;
esac
