#!/usr/bin/env bash
# bench/prefix_offcost.sh - what the prefix cache costs plain allocate/free.
#
# Builds bench/prefix_alloc.c four ways with the same compiler and flags
# (clang -O2, as the Bazel build):
#   before   against the tree of BASE, the last commit without lib/prefix/prefix.c
#            (default: the parent of the commit that added it)
#   nohooks  against the current tree with the mode branches of the
#            allocate/free calls (lib/pool/pool_alloc.c, pool_free.c and
#            pool_free_all.c: every test of p->mode) compiled out, i.e. the
#            same code without the feature's hooks: the baseline for what the
#            feature costs while it is off
#   off      against the current tree, prefix_cache false
#   on       against the current tree, prefix_cache true (no key published)
# and runs them in turns, ROUNDS times per thread count, so that load on a
# shared machine hits all alike.  Prints the median allocate+free pairs per
# CPU-second of each and the ratios off/nohooks (the cost of the feature
# present but off; 1.00 = none), off/before, on/before and on/off (a prefix
# pool with nothing published against the plain pool), and whether on/off
# is at least 0.8x at every thread count.
#
#   bench/prefix_offcost.sh [ROUNDS [SECONDS [BASE]]]      (from the repository root)
set -euo pipefail
rounds=${1:-7}
secs=${2:-0.5}
repo=$(git rev-parse --show-toplevel)
base=${3:-$(git -C "$repo" log --follow --diff-filter=A --format=%H -- lib/prefix/prefix.c | tail -1)^}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

flags=(-O2 -std=c11 -D_POSIX_C_SOURCE=200809L -w)
# -lurcu-cds: the tree before may still use liburcu's hash table.
libs=(-lurcu-bp -lurcu-cds -lurcu-common -lcrypto -lhiredis -lpthread -lm)
mkdir -p "$tmp/before"
git -C "$repo" archive "$base" lib include | tar -x -C "$tmp/before"
# -I"$repo" last: bench/clock.h, which the trees under test do not have.
clang "${flags[@]}" -I"$tmp/before/include" -I"$tmp/before" -I"$repo" $(find "$tmp/before/lib" -name "*.c") \
	"$repo/bench/prefix_alloc.c" -o "$tmp/before.bin" "${libs[@]}"
clang "${flags[@]}" -DHAVE_PREFIX -I"$repo/include" -I"$repo" $(find "$repo/lib" -name "*.c") \
	"$repo/bench/prefix_alloc.c" -o "$tmp/now.bin" "${libs[@]}"
mkdir -p "$tmp/nohooks"
cp -r "$repo/lib" "$repo/include" "$tmp/nohooks/"
# p->mode, but not p->mode->call(...), becomes 0; the script fails if none did.
for f in pool_alloc.c pool_free.c pool_free_all.c; do
	grep -q 'p->mode[^-]' "$tmp/nohooks/lib/pool/$f" || { echo "prefix_offcost.sh: no p->mode test in $f" >&2; exit 1; }
	sed -i 's/p->mode\([^-]\)/0\1/g' "$tmp/nohooks/lib/pool/$f"
done
clang "${flags[@]}" -DHAVE_PREFIX -I"$tmp/nohooks/include" -I"$tmp/nohooks" -I"$repo" \
	$(find "$tmp/nohooks/lib" -name "*.c") "$repo/bench/prefix_alloc.c" -o "$tmp/nohooks.bin" "${libs[@]}"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "allocate+free pairs per CPU-second, median of $rounds runs of $secs s"
echo "before = $(git -C "$repo" rev-parse --short "$base"), now = $(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet || echo ' + uncommitted changes')"
printf '%-8s %12s %12s %12s %12s %11s %10s %10s %10s\n' threads before nohooks off on off/nohooks off/before on/before on/off
worst=
for t in 1 2 4; do
	: >"$tmp/b" && : >"$tmp/h" && : >"$tmp/f" && : >"$tmp/o"
	for ((r = 0; r < rounds; r++)); do
		"$tmp/before.bin" "$t" "$secs" >>"$tmp/b"
		"$tmp/nohooks.bin" "$t" "$secs" off >>"$tmp/h"
		"$tmp/now.bin" "$t" "$secs" off >>"$tmp/f"
		"$tmp/now.bin" "$t" "$secs" on >>"$tmp/o"
	done
	b=$(median <"$tmp/b") h=$(median <"$tmp/h") f=$(median <"$tmp/f") o=$(median <"$tmp/o")
	onoff=$(echo "$o / $f" | bc -l)
	printf '%-8s %12s %12s %12s %12s %10.3fx %9.3fx %9.3fx %9.3fx\n' "$t" "$b" "$h" "$f" "$o" \
		"$(echo "$f / $h" | bc -l)" "$(echo "$f / $b" | bc -l)" "$(echo "$o / $b" | bc -l)" "$onoff"
	if [ -z "$worst" ] || [ "$(echo "$onoff < $worst" | bc -l)" = 1 ]; then worst=$onoff; fi
done
# The prefix cache on (nothing published) against it off, same binary, same run.
verdict=MET
[ "$(echo "$worst < 0.8" | bc -l)" = 1 ] && verdict="NOT MET"
printf '  target on/off >= 0.8x at 1, 2 and 4 threads: %s (lowest %.3fx)\n' "$verdict" "$worst"
