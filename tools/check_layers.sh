#!/usr/bin/env bash
# tools/check_layers.sh - fail when a module includes one above it, or a tool
# reaches into the library's private headers.
#
#   tools/check_layers.sh [ROOT]     ROOT defaults to the repository
#
# The library's modules, lowest first (lib/README.md says what each holds):
#   base  <  pool  <  prefix  <  storage  <  kvcache,   and  base < bufcache < storage
#   (the prefix cache is a mode of the pool: the pool calls it only through
#   the table of struct kvpi_pool_mode, so lib/pool includes nothing above it)
# A file in lib/M/ may include lib/N/ only when N is M or below M.  Programs
# and tests (stress/, replay/, bench/, tests/, docs/examples/, python/) include the
# public headers <kvpool/...> and the documented test-support headers of
# lib/testing/ only.  The Python package is layered likewise (below).  Prints
# each violation as FILE:LINE: reason and exits 1 if there was any.
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

# below[M] = modules M may include besides itself.
declare -A below=(
	[base]=""
	[pool]="base"
	[prefix]="base pool"
	[bufcache]="base"
	[storage]="base pool prefix bufcache"
	[kvcache]="base pool prefix bufcache storage"
	[remote]="base pool prefix bufcache storage"
	[testing]="base pool prefix bufcache storage kvcache remote"
)

bad=0
report() {
	echo "$1: $2"
	bad=1
}

# Library files.
while IFS= read -r f; do
	m=$(cut -d/ -f2 <<<"$f")
	if [ -z "${below[$m]+x}" ]; then
		report "$f" "file in unknown module lib/$m (add it to tools/check_layers.sh)"
		continue
	fi
	while IFS=: read -r ln inc; do
		n=$(sed -E 's#.*"lib/([^/]+)/.*#\1#' <<<"$inc")
		[ "$n" = "$m" ] && continue
		case " ${below[$m]} " in
		*" $n "*) ;;
		*) report "$f:$ln" "lib/$m includes lib/$n, which is not below it" ;;
		esac
	done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"lib/' "$f" | sed -E 's/^([0-9]+):.*(("lib\/[^"]+")).*/\1:\2/')
done < <(find lib -mindepth 2 -type f \( -name '*.c' -o -name '*.h' \) | sort)

# Programs and tests.
for d in stress replay bench tests docs/examples python; do
	[ -d "$d" ] || continue
	while IFS=: read -r f ln inc; do
		case "$inc" in
		*'"lib/testing/'*) ;;
		*) report "$f:$ln" "includes a private header ($inc): use <kvpool/...> or lib/testing/" ;;
		esac
	done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"lib/' "$d" --include='*.c' --include='*.h' --include='*.cc' |
		sed -E 's/^([^:]+):([0-9]+):.*("lib\/[^"]+").*/\1:\2:\3/')
done
# The Python package, layered as the library: pool < storage < kvcache (the
# modules they share - _lib, _handle, errors, stats, prefix - sit below all
# three).  A module may not import one above it, lazily inside a function
# either.
declare -A pylayer=([pool]=1 [storage]=2 [kvcache]=3)
for m in pool storage kvcache; do
	f=python/kvpool/$m.py
	[ -f "$f" ] || continue
	while IFS=: read -r ln n; do
		[ -n "${pylayer[$n]+x}" ] && [ "${pylayer[$n]}" -gt "${pylayer[$m]}" ] &&
			report "$f:$ln" "python kvpool.$m imports kvpool.$n, which is above it"
	done < <(grep -nE '^[[:space:]]*from[[:space:]]+\.[[:space:]]*(import[[:space:]]+)?[a-z_]+' "$f" |
		sed -E 's/^([0-9]+):[[:space:]]*from[[:space:]]+\.[[:space:]]*(import[[:space:]]+)?([a-z_]+).*/\1:\3/')
done
exit $bad
