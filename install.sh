#!/usr/bin/env bash
# rbdfence installer. Two parts, each idempotent and reversible:
#   install.sh frontend [--prefix DIR] [--apply] [--uninstall]   OpenNebula front-end
#   install.sh host     [--prefix DIR] [--uninstall]             every KVM host
# --prefix installs below DIR (tests, packaging); binaries are taken from
# ./bin (make build) or $RBDFENCE_BIN.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
part=${1:-}
[ $# -gt 0 ] && shift
case "$part" in
frontend) exec bash "$here/packaging/install-frontend.sh" "$@" ;;
host) exec bash "$here/packaging/install-host.sh" "$@" ;;
*)
	echo "usage: install.sh frontend|host [--prefix DIR] [--uninstall] (frontend: [--apply])" >&2
	exit 2
	;;
esac
