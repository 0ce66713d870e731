#!/usr/bin/env bash
# bench/mutex_handoffs.sh - how often each mutex of a program passes between
# threads (bench/mutex_handoffs.c, LD_PRELOAD), and which functions take
# the busiest ones:
#
#   bench/mutex_handoffs.sh PROGRAM [ARGS...]
#
# e.g. bench/mutex_handoffs.sh bazel-bin/bench/lifecycle --only lifecycle
#        --modes prefix --threads 2 --runs 1 --trace TRACE
#
# Prints the program's own output, then the total locks and handoffs and
# the mutexes with the most handoffs, each with the function of its last
# taker (addr2line on PROGRAM).  Mutexes are told apart by address, so a
# program that frees one and makes another at the same place counts them
# as one.  Not under a sanitizer (an LD_PRELOADed library and ASan/TSan's
# own interceptors do not mix).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '2,16p' "$0"; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -shared -fPIC "$here/mutex_handoffs.c" -o "$out/mh.so" -ldl
prog=$(command -v "$1")
LD_PRELOAD="$out/mh.so" "$@" 2>"$out/err" || true
grep -v '^mutex_handoffs:' "$out/err" >&2 || true
grep '^mutex_handoffs: [0-9]' "$out/err"
grep '^mutex_handoffs: 0x' "$out/err" | while read -r _ addr _ locks _ hand _ _ at; do
	off=${at##*+}
	fn=$(addr2line -f -e "$prog" "$off" 2>/dev/null | head -1)
	printf '%s locks %s handoffs %s in %s\n' "$addr" "$locks" "$hand" "${fn:-?}"
done
