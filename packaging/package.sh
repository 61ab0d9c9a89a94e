#!/usr/bin/env bash
# Build rbdfence's packages, a .deb and an .rpm of each, with the
# distributions' own tools (dpkg-deb, dpkg-shlibdeps; rpmbuild):
#   rbdfence           the CLI (/usr/bin/rbdfence: admin verbs, the host step),
#                      /etc/one/rbdfence.yaml, the audit log's logrotate, docs
#   rbdfence-frontend  the OpenNebula front-end: the VMM local actions, the
#                      host binary onehost sync ships, the HA hook's fence, the
#                      event delivery timer, rbdfence-onedconf (pure Go: no
#                      Ceph library needed here)
#   rbdfence-host      the libvirt qemu hook of every KVM host
# Every file is where packaging/layout says, owned by its package (dpkg -S,
# rpm -qf). The maintainer scripts (packaging/scripts/) only take over from a
# script-made install of an older rbdfence, enable the timer, and show or
# undo the one oned.conf change (packaging/onedconf.sh).
#
#   packaging/package.sh [--bin DIR] [--out DIR] [--version VERSION] [--formats "deb rpm"]
#   packaging/package.sh --print-version                  the version it would use
#   packaging/package.sh --sanitize-version DESCRIBE      DESCRIBE made a deb/rpm version
#
# --bin: the built binaries (default ./bin, `make build`; or $RBDFENCE_BIN).
# --out: where the packages go (default ./dist).
# --version: default from `git describe` (see sanitize_version), or
#   $RBDFENCE_VERSION.
# The maintainer field comes from $RBDFENCE_PKG_MAINTAINER.
#
# Dependencies are computed from the binaries: dpkg-shlibdeps (.deb) and
# rpm's elfdeps (.rpm) read their ELF NEEDED entries and symbol versions
# (libc6, libstdc++6, libgcc-s1, librados2, with the versions the binaries
# need); librbd1, which the Ceph adapter loads with dlopen when it breaks a
# lock, is added from the relation librbd1 declares for its soname. The
# changelogs are made from CHANGELOG.md (packaging/changelog.sh), the
# copyright file by packaging/copyright.sh. File times are the last
# commit's ($SOURCE_DATE_EPOCH when set): the same tree gives the same
# packages.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
PKGS=(rbdfence rbdfence-frontend rbdfence-host)

die() {
	echo "package.sh: ERROR: $*" >&2
	exit 1
}
usage() {
	echo "usage: packaging/package.sh [--bin DIR] [--out DIR] [--version VERSION] [--formats \"deb rpm\"]" >&2
	echo "       packaging/package.sh --print-version | --sanitize-version DESCRIBE" >&2
	exit 2
}

# sanitize_version DESCRIBE: a `git describe --tags --long --dirty` string
# (vX.Y.Z[-pre]-N-gHASH[-dirty]) as a version that dpkg and rpm both accept
# and order by release, then commits since it:
#   v1.2.3-0-gabc1234        -> 1.2.3
#   v1.2.3-4-gabc1234        -> 1.2.3+4.gabc1234
#   v1.2.3-4-gabc1234-dirty  -> 1.2.3+4.gabc1234.dirty
#   v1.3.0-rc1-0-gabc1234    -> 1.3.0~rc1          (before 1.3.0)
# A base that does not start with a digit gets 0.0.0+ in front; characters
# other than letters, digits, . + ~ become '.'.
sanitize_version() {
	local d=$1 base n="" hash="" dirty=""
	d=${d#v}
	if [[ $d =~ ^(.*)-dirty$ ]]; then
		dirty=1
		d=${BASH_REMATCH[1]}
	fi
	if [[ $d =~ ^(.+)-([0-9]+)-g([0-9a-f]+)$ ]]; then
		base=${BASH_REMATCH[1]}
		n=${BASH_REMATCH[2]}
		hash=${BASH_REMATCH[3]}
	else
		base=$d
	fi
	base=${base//-/\~}
	base=$(printf '%s' "$base" | sed -e 's/[^A-Za-z0-9.+~]/./g')
	[[ $base =~ ^[0-9] ]] || base=0.0.0+$base
	local extra=""
	if [[ -n $n && ($n != 0 || -n $dirty) ]]; then
		extra=$n.g$hash
	fi
	[[ -n $dirty ]] && extra=${extra:+$extra.}dirty
	if [[ -n $extra ]]; then
		if [[ $base == *+* ]]; then
			base=$base.$extra
		else
			base=$base+$extra
		fi
	fi
	printf '%s\n' "$base"
}

# git_version: the version of the work tree. Without a vX.Y tag it counts
# from v0.0.0, so that every commit gets a larger version (0.0.0+N.gHASH).
git_version() {
	local d
	git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || die "$src is not a git work tree: pass --version"
	if d=$(git -C "$src" describe --tags --long --dirty --match 'v[0-9]*' 2>/dev/null); then
		:
	else
		local n h dirty=""
		n=$(git -C "$src" rev-list --count HEAD)
		h=$(git -C "$src" rev-parse --short=7 HEAD)
		[[ -z $(git -C "$src" status --porcelain --untracked-files=no) ]] || dirty=-dirty
		d=v0.0.0-$n-g$h$dirty
	fi
	sanitize_version "$d"
}

BIN=${RBDFENCE_BIN:-$src/bin}
OUT=$src/dist
VERSION=${RBDFENCE_VERSION:-}
FORMATS="deb rpm"

while [[ $# -gt 0 ]]; do
	case $1 in
	--bin | --out | --version | --formats)
		[[ $# -ge 2 ]] || usage
		case $1 in --bin) BIN=$2 ;; --out) OUT=$2 ;; --version) VERSION=$2 ;; --formats) FORMATS=$2 ;; esac
		shift 2
		;;
	--print-version)
		if [[ -n $VERSION ]]; then sanitize_version "$VERSION"; else git_version; fi
		exit 0
		;;
	--sanitize-version)
		[[ $# -ge 2 ]] || usage
		sanitize_version "$2"
		exit 0
		;;
	-h | --help) usage ;;
	*)
		echo "package.sh: unknown argument '$1'" >&2
		usage
		;;
	esac
done

if [[ -n $VERSION ]]; then VERSION=$(sanitize_version "$VERSION"); else VERSION=$(git_version); fi
for f in $FORMATS; do
	case $f in
	deb) command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null || die "the .deb needs dpkg-deb and dpkg-shlibdeps (Debian: dpkg-dev)" ;;
	rpm) command -v rpmbuild >/dev/null || die "the .rpm needs rpmbuild (Debian: rpm)" ;;
	*) die "unknown format '$f' (deb, rpm)" ;;
	esac
done
[[ -d $BIN ]] || die "binaries directory $BIN not found: run 'make build' or pass --bin"
BIN=$(cd "$BIN" && pwd)
while read -r _ _ _ s _; do
	[[ $s == bin/* ]] || continue
	[[ -f $BIN/${s#bin/} && -x $BIN/${s#bin/} ]] || die "$BIN/${s#bin/} not found: run 'make build' or pass --bin"
done < <(grep -v '^#' "$here/layout")

ARCH=$(go env GOARCH 2>/dev/null || true)
case $ARCH in
amd64) RPMARCH=x86_64 BITS=64 ;;
arm64) RPMARCH=aarch64 BITS=64 ;;
ppc64le) RPMARCH=ppc64le BITS=64 ;;
s390x) RPMARCH=s390x BITS=64 ;;
*) die "cannot tell the architecture (go env GOARCH: '$ARCH')" ;;
esac
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)}
export RBDFENCE_PKG_MAINTAINER=${RBDFENCE_PKG_MAINTAINER:-rbdfence maintainers <rbdfence@users.noreply.github.com>}
MAINTAINER=$RBDFENCE_PKG_MAINTAINER
HOOK_BIN=/usr/lib/rbdfence/bin/rbdfence-hook

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
bash "$here/copyright.sh" >"$work/copyright" || die "packaging/copyright.sh failed"

# fill FILE: a packaging/files/ file with @HOOK@ and @OPTIONS@ filled in.
fill() {
	local c
	c=$(cat "$1")
	c=${c//@HOOK@/"'$HOOK_BIN'"}
	printf '%s\n' "${c//@OPTIONS@/}"
}

# script FORMAT NAME: a maintainer script for FORMAT: the lines between
# "#if deb" (or "#if rpm") and "#endif" only in that format's, the libvirt
# notice put in.
script() {
	local fmt=$1 s=$here/scripts/$2 line keep=1
	while IFS= read -r line; do
		case $line in
		'#if deb' | '#if rpm') [[ $line == "#if $fmt" ]] || keep=0 ;;
		'#endif') keep=1 ;;
		'#@LIBVIRT_HOOK_NOTICE@') cat "$here/libvirt-hook-notice.sh" ;;
		*) ((keep)) && printf '%s\n' "$line" ;;
		esac
	done <"$s"
}

# stage FORMAT PKG ROOT: PKG's files of the layout into ROOT; prints the
# rpm file list lines (%config, %dir, %attr) of what it put there: the
# directories it owns are the layout's "dir" lines and every directory
# named for rbdfence above its files.
stage() {
	local fmt=$1 pkg=$2 root=$3 p mode path s flags d unitdir=/lib/systemd/system
	local -A own=()
	[[ $fmt == rpm ]] && unitdir=/usr/lib/systemd/system
	while read -r p mode path s flags; do
		[[ -n $p && $p != \#* && $p == "$pkg" && ,$flags, != *,local,* ]] || continue
		path=${path//@UNITDIR@/$unitdir}
		path=${path//@HOOKDIR@/${HOOK_BIN%/*}}
		s=${s//@HOOKDIR@/${HOOK_BIN%/*}}
		mkdir -p "$root$(dirname "$path")"
		d=$(dirname "$path")
		while [[ $d == *rbdfence* ]]; do
			own[$d]=1
			d=$(dirname "$d")
		done
		case $mode in
		dir)
			mkdir -p "$root$path"
			own[$path]=1
			continue
			;;
		link)
			ln -sfn "$s" "$root$path"
			echo "$path"
			continue
			;;
		esac
		case $s in
		bin/*) cp "$BIN/${s#bin/}" "$root$path" ;;
		files/*) fill "$here/$s" >"$root$path" ;;
		*) cp "$here/$s" "$root$path" ;;
		esac
		chmod "$mode" "$root$path"
		if [[ ,$flags, == *,conf,* ]]; then
			echo "$path" >>"$root.conffiles"
			echo "%config(noreplace) %attr($mode,root,root) $path"
		else
			echo "%attr($mode,root,root) $path"
		fi
	done <"$here/layout"
	for d in "${!own[@]}"; do echo "%dir %attr(0755,root,root) $d"; done | LC_ALL=C sort
}

# ------------------------------------------------------------------ .deb --

# shlibs ROOT: the Depends that dpkg-shlibdeps computes for ROOT's ELF
# binaries (the front-end's host binary excepted: it runs on the hosts),
# plus librbd1 where the Ceph adapter is linked in (dlopen).
shlibs() {
	local root=$1 elves=() f deps
	while IFS= read -r f; do
		[[ $f == */var/lib/one/remotes/rbdfence/rbdfence-host ]] && continue
		[[ $(head -c 4 "$f" | tr -d '\0') == $'\177ELF' ]] || continue
		grep -q ' NEEDED ' <<<"$(objdump -p "$f" 2>/dev/null)" && elves+=("$f") # static Go binaries need nothing
	done < <(find "$root" -type f -perm -u+x | LC_ALL=C sort)
	[[ ${#elves[@]} -gt 0 ]] || return 0
	deps=$(cd "$work" && dpkg-shlibdeps -O "${elves[@]}" 2>"$work/shlibdeps.log") || die "dpkg-shlibdeps: $(cat "$work/shlibdeps.log")"
	deps=${deps#shlibs:Depends=}
	if [[ $deps == *librados2* ]]; then
		local rbd
		rbd=$(dpkg-query --control-show librbd1 shlibs 2>/dev/null | awk '$1 == "librbd" && $2 == "1" { $1 = $2 = ""; sub(/^ +/, ""); print; exit }')
		[[ -n $rbd ]] || die "librbd1's shlibs not found: install librbd1 (the binaries load it with dlopen)"
		deps="$deps, $rbd"
	fi
	echo "$deps"
}

build_deb() {
	local pkg=$1 root=$work/debian/$1 depends relations="" doc
	mkdir -p "$root/DEBIAN"
	: >"$root.conffiles"
	stage deb "$pkg" "$root" >/dev/null
	doc=$root/usr/share/doc/$pkg
	mkdir -p "$doc"
	install -m 0644 "$work/copyright" "$doc/copyright"
	bash "$here/changelog.sh" deb "$VERSION" | gzip -9n >"$doc/changelog.Debian.gz"
	if [[ $pkg == rbdfence ]]; then
		install -m 0644 "$src/README.md" "$doc/README.md"
		install -m 0644 "$src/docs/SECURITY.md" "$doc/SECURITY.md"
		gzip -9n <"$src/CHANGELOG.md" >"$doc/changelog.gz"
	fi
	if [[ -f $here/debian/$pkg.lintian-overrides ]]; then
		install -D -m 0644 "$here/debian/$pkg.lintian-overrides" "$root/usr/share/lintian/overrides/$pkg"
	fi
	depends=$(shlibs "$root")
	case $pkg in
	rbdfence-frontend) relations="Suggests: rbdfence (= $VERSION-1)" ;;
	rbdfence-host) depends="rbdfence (= $VERSION-1)${depends:+, $depends}" ;;
	esac
	for s in preinst postinst prerm postrm; do
		[[ -f $here/scripts/$pkg.$s ]] || continue
		script deb "$pkg.$s" >"$root/DEBIAN/$s"
		chmod 0755 "$root/DEBIAN/$s"
	done
	[[ -s $root.conffiles ]] && install -m 0644 "$root.conffiles" "$root/DEBIAN/conffiles"
	(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0r md5sum) >"$root/DEBIAN/md5sums"
	{
		echo "Package: $pkg"
		echo "Source: rbdfence"
		echo "Version: $VERSION-1"
		echo "Architecture: $ARCH"
		echo "Maintainer: $MAINTAINER"
		echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
		[[ -z $depends ]] || echo "Depends: $depends"
		[[ -z $relations ]] || echo "$relations"
		echo "Section: admin"
		echo "Priority: optional"
		echo "Homepage: https://github.com/rbdfence/rbdfence"
		cat "$here/debian/$pkg.description"
	} >"$root/DEBIAN/control"
	find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	# gzip, not dpkg's default xz: a fifth of the time on these Go binaries, 2 MB larger.
	dpkg-deb --root-owner-group -Zgzip --build "$root" "$OUT/${pkg}_${VERSION}-1_$ARCH.deb" >/dev/null ||
		die "dpkg-deb $pkg failed"
	echo "$OUT/${pkg}_${VERSION}-1_$ARCH.deb"
}

# ------------------------------------------------------------------ .rpm --

build_rpms() {
	local root=$work/rpm/root pkg top=$work/rpm/top
	mkdir -p "$root" "$top" "$work/rpm/lists" "$work/rpm/scripts"
	for pkg in "${PKGS[@]}"; do
		: >"$root.conffiles"
		stage rpm "$pkg" "$root" >"$work/rpm/lists/$pkg.files"
		install -D -m 0644 "$src/LICENSE" "$root/usr/share/licenses/$pkg/LICENSE"
		install -m 0644 "$work/copyright" "$root/usr/share/licenses/$pkg/copyright"
		printf '%%license /usr/share/licenses/%s/%s\n' "$pkg" LICENSE "$pkg" copyright >>"$work/rpm/lists/$pkg.files"
		echo "%dir %attr(0755,root,root) /usr/share/licenses/$pkg" >>"$work/rpm/lists/$pkg.files"
		for s in preinst postinst prerm postrm; do
			# rpm expands macros in scriptlets: a % stays a %.
			[[ -f $here/scripts/$pkg.$s ]] && script rpm "$pkg.$s" | sed 's/%/%%/g' >"$work/rpm/scripts/$pkg.$s"
		done
	done
	install -D -m 0644 "$src/README.md" "$root/usr/share/doc/rbdfence/README.md"
	install -m 0644 "$src/docs/SECURITY.md" "$src/CHANGELOG.md" "$root/usr/share/doc/rbdfence/"
	printf '%%doc /usr/share/doc/rbdfence/%s\n' README.md SECURITY.md CHANGELOG.md >>"$work/rpm/lists/rbdfence.files"
	echo "%dir %attr(0755,root,root) /usr/share/doc/rbdfence" >>"$work/rpm/lists/rbdfence.files"
	find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	{
		cat "$here/rbdfence.spec"
		echo
		echo "%changelog"
		bash "$here/changelog.sh" rpm "$VERSION"
	} >"$work/rpm/rbdfence.spec"
	rpmbuild -bb --quiet --target "$RPMARCH" \
		--define "_topdir $top" --define "_rpmdir $OUT" --define '_rpmfilename %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm' \
		--define "_buildhost rbdfence" --define "use_source_date_epoch_as_buildtime 1" --define "clamp_mtime_to_source_date_epoch 1" \
		--define "_binary_payload w9.gzdio" \
		--define "rbdfence_version $VERSION" --define "rbdfence_root $root" \
		--define "rbdfence_lists $work/rpm/lists" --define "rbdfence_scripts $work/rpm/scripts" \
		--define "rbdfence_packager $MAINTAINER" --define "rbdfence_librbd librbd.so.1()(${BITS}bit)" \
		"$work/rpm/rbdfence.spec" >"$work/rpmbuild.log" 2>&1 || die "rpmbuild failed: $(cat "$work/rpmbuild.log")"
	for pkg in "${PKGS[@]}"; do
		[[ -f $OUT/$pkg-$VERSION-1.$RPMARCH.rpm ]] || die "rpmbuild did not write $pkg-$VERSION-1.$RPMARCH.rpm: $(cat "$work/rpmbuild.log")"
		echo "$OUT/$pkg-$VERSION-1.$RPMARCH.rpm"
	done
}

echo "package.sh: rbdfence $VERSION ($ARCH) into $OUT" >&2
printf 'Source: rbdfence\n\nPackage: rbdfence\nArchitecture: any\n' | install -D -m 0644 /dev/stdin "$work/debian/control"
for f in $FORMATS; do
	if [[ $f == deb ]]; then
		for pkg in "${PKGS[@]}"; do build_deb "$pkg"; done
	else
		build_rpms
	fi
done
