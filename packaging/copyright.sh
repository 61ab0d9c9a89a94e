#!/usr/bin/env bash
# Print the copyright file of rbdfence's packages (Debian machine-readable
# format, DEP-5): rbdfence itself (Apache-2.0, LICENSE), then every Go
# module linked into the packaged binaries, with its own license text as
# its module ships it and its NOTICE (from `go list -deps` of the binaries:
# always the modules of this build); the Apache License 2.0's full text is
# not repeated: on Debian it is /usr/share/common-licenses/Apache-2.0. package.sh writes it to
# /usr/share/doc/<package>/copyright (deb) and /usr/share/licenses/<package>/
# (rpm, %license).
#
#   packaging/copyright.sh
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"

# indent: DEP-5 continuation lines (one leading space, "." for a blank line).
indent() { sed -e 's/[[:space:]]*$//' -e 's/^$/./' -e 's/^/ /'; }

# license_text FILE: the license text to quote: the Apache License 2.0's
# full text (TERMS AND CONDITIONS ...) is not repeated, the Apache-2.0
# paragraph at the end points to it (Debian: /usr/share/common-licenses).
license_text() {
	awk '
		{ l[NR] = $0 }
		END {
			n = NR
			for (i = 1; i <= NR; i++)
				if (l[i] ~ /Apache License[[:space:]]*$/ && (l[i+1] ~ /Version 2\.0, January 2004/ || l[i+2] ~ /Version 2\.0, January 2004/)) { n = i - 1; break }
			s = 1
			while (s <= n && l[s] ~ /^[[:space:]]*$/) s++
			e = n
			while (e >= s && l[e] ~ /^[[:space:]]*$/) e--
			for (i = s; i <= e; i++) print l[i]
			if (e >= s && n < NR) print "\nThe Apache License, Version 2.0: see the License: Apache-2.0 paragraph at the end."
		}' "$1"
}

# license_id FILE: the SPDX id of a module's license text.
license_id() {
	local f=$1
	if grep -q 'MIT License' "$f" && grep -q 'Apache License' "$f"; then
		echo "MIT and Apache-2.0"
	elif grep -q 'Apache License' "$f" && grep -q 'Version 2.0' "$f"; then
		echo "Apache-2.0"
	elif grep -q 'Mozilla Public License' "$f"; then
		echo "MPL-2.0"
	elif grep -q 'Permission is hereby granted, free of charge' "$f"; then
		echo "MIT"
	elif grep -q 'Neither the name' "$f"; then
		echo "BSD-3-Clause"
	elif grep -q 'Redistribution and use in source and binary forms' "$f"; then
		echo "BSD-2-Clause"
	else
		echo "see-text"
	fi
}

cat <<HEAD
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: rbdfence
Upstream-Contact: rbdfence maintainers <rbdfence@users.noreply.github.com>
Source: https://github.com/rbdfence/rbdfence

Files: *
Copyright: 2026 The rbdfence authors
License: Apache-2.0
HEAD

# The Go standard library and runtime are in every binary.
goroot=$(go env GOROOT)
printf '\nFiles: vendor/go/*\nCopyright: The Go Authors\nComment: the Go standard library and runtime (%s), linked into the binaries.\nLicense: BSD-3-Clause\n' "$(go env GOVERSION)"
indent <"$goroot/LICENSE"

own=$(go list -m)
go list -deps -tags pacific -f '{{with .Module}}{{.Path}} {{.Version}} {{.Dir}}{{end}}' ./cmd/... ./hooks/... ./drivers/... |
	sort -u | while read -r path version dir; do
	[[ $path == "$own" ]] && continue
	lic=""
	for f in LICENSE LICENSE.txt LICENSE.md COPYING; do
		[[ -f $dir/$f ]] && lic=$dir/$f && break
	done
	[[ -n $lic ]] || {
		echo "copyright.sh: no license file in module $path $version ($dir)" >&2
		exit 1
	}
	holder=$(grep -m1 -E '^[[:space:]]*Copyright (\(c\)|\(C\)|©)? ?[0-9]' "$lic" | sed -e 's/^[[:space:]]*Copyright[[:space:]]*//' -e 's/^(c)[[:space:]]*//I' || true)
	[[ -n $holder ]] || holder="the $path authors"
	printf '\nFiles: vendor/%s/*\nCopyright: %s\nComment: Go module %s %s, linked into the binaries.\n' "$path" "$holder" "$path" "$version"
	[[ -f $dir/NOTICE ]] && { echo " Its NOTICE:"; indent <"$dir/NOTICE"; }
	echo "License: $(license_id "$lic")"
	text=$(license_text "$lic")
	[[ -z $text ]] || printf '%s\n' "$text" | indent
done

cat <<'APACHE'

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License");
 you may not use this file except in compliance with the License.
 You may obtain a copy of the License at
 .
     http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS,
 WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 See the License for the specific language governing permissions and
 limitations under the License.
 .
 On Debian systems, the complete text of the Apache License, Version 2.0
 can be found in "/usr/share/common-licenses/Apache-2.0"; the .rpm packages
 carry it as /usr/share/licenses/<package>/LICENSE.
APACHE
