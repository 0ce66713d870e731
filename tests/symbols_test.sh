#!/usr/bin/env bash
# tests/symbols_test.sh - libkvpool.so.0 exports the public API and nothing else.
#
#   symbols_test.sh LIBKVPOOL_SO UNVERSIONED_SO HEADER_DIR LIBKVPOOL_A
#
# The public API is every function declared by the public headers, read from
# the preprocessed kvpool.h (cc -E: comments and macros gone), a list made
# independently of tools/kvpool_headers.py, which writes the version script.
# Checks on LIBKVPOOL_SO (//tools:libkvpool.so):
#   - SONAME libkvpool.so.0, version definition KVPOOL_0;
#   - every defined dynamic symbol (objdump -T) is a public function, of
#     version KVPOOL_0: no internal kvpi_* helper, no TLS variable;
#   - every public function the library defines (nm LIBKVPOOL_A) is exported;
#     one declared but defined nowhere is reported, not failed (a header may
#     declare an API ahead of its implementation).
# UNVERSIONED_SO is //:kvpool's own libkvpool.so, built without the version
# script: the same check must reject it (it exports internals such as
# kvpi_grow_locked), which shows the check can fail.
set -euo pipefail

so=$1 raw=$2 headers=$3 archive=$4
work=${TEST_TMPDIR:-$(mktemp -d)}
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

mkdir -p "$work/inc"
ln -sfn "$(cd "$headers" && pwd)" "$work/inc/kvpool"
cc -E -P -I "$work/inc" "$work/inc/kvpool/kvpool.h" >"$work/pp.h"
comm -23 <(grep -oE 'kvp_[a-z0-9_]+ *\(' "$work/pp.h" | grep -oE 'kvp_[a-z0-9_]+' | sort -u) \
	<(grep -oE '\(\*kvp_[a-z0-9_]+\)' "$work/pp.h" | grep -oE 'kvp_[a-z0-9_]+' | sort -u) \
	>"$work/public"
n_public=$(wc -l <"$work/public")
[ "$n_public" -ge 40 ] || fail "only $n_public public functions found in the headers"

# "addr flags section size [version] name" for each defined dynamic symbol.
exported() {
	objdump -T "$1" | awk '/^[0-9a-f]+ / && $0 !~ /\*UND\*/ { print }'
}

# Prints what is wrong with $1's exports; empty when nothing is.
problems() {
	exported "$1" | while read -r line; do
		name=${line##* }
		case "$line" in
		*" KVPOOL_0 "*) ;;
		*) [ "$name" = KVPOOL_0 ] || echo "unversioned or wrong version: $line" ;;
		esac
		[ "$name" = KVPOOL_0 ] && continue
		grep -qxF "$name" "$work/public" || echo "not a public function: $name"
		case "$line" in
		*" DF "*) ;;
		*) echo "not a function: $line" ;;
		esac
	done
}

objdump -p "$so" | grep -qE 'SONAME +libkvpool\.so\.0$' || fail "SONAME is not libkvpool.so.0"
objdump -p "$so" | grep -A3 'Version definitions' | grep -q KVPOOL_0 ||
	fail "no KVPOOL_0 version definition"
bad=$(problems "$so")
[ -z "$bad" ] || fail "$so exports more than the public API:"$'\n'"$bad"
exported "$so" | awk '{ print $NF }' | sort -u >"$work/exported"
nm --defined-only "$archive" 2>/dev/null | awk '$2 == "T" { print $3 }' | sort -u >"$work/defined"
missing=$(comm -23 "$work/public" "$work/exported" | comm -12 - "$work/defined")
[ -z "$missing" ] || fail "public functions defined but not exported: $missing"
undefined=$(comm -23 "$work/public" "$work/defined" | tr '\n' ' ')
[ -z "$undefined" ] || echo "note: declared in the headers, defined nowhere yet: $undefined"
echo "ok: $(wc -l <"$work/exported") symbols exported, all public, KVPOOL_0"

# The check itself: an unversioned build exporting internals must fail it.
bad=$(problems "$raw")
[ -n "$bad" ] || fail "the check accepts //:kvpool's unversioned libkvpool.so"
grep -q "not a public function: kvpi_" <<<"$bad" ||
	fail "the unversioned libkvpool.so exports no internal kvpi_* symbol?"
echo "ok: the check rejects the unversioned build ($(grep -c . <<<"$bad") problems), e.g.:"
grep "not a public function: kvpi_" <<<"$bad" | sed -n 1,3p
