#!/usr/bin/env bash
# bench/callgrind_bufcache.sh - instructions per buffer-cache hit pair in each
# segment of bufcache_bench's thread-history run, counted by callgrind (perf
# cannot count in this VM), for the tree in the current directory or the one given:
#
#   bench/callgrind_bufcache.sh [TREE] [PAIRS]   (TREE: a checkout of kvpool; default .)
#
# Builds TREE's lib/*.c with bench/bufcache_bench.c and bench/ref_bufcache.c
# from this checkout (the plain Bazel build's clang flags), then runs the
# history child once per segment with --pairs PAIRS (default 20000) and
# collection only inside measured_pairs(), and prints Ir per alloc+free pair.
# Callgrind runs one thread at a time, so what it shows is the work a pair
# does, not contention.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tree=$(cd "${1:-.}" && pwd)
pairs=${2:-20000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$tree" && clang -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_FORTIFY_SOURCE=2 \
	-fstack-protector -fno-omit-frame-pointer -Iinclude -I. -I"$here" $(find lib -name "*.c") \
	"$here/bench/bufcache_bench.c" "$here/bench/ref_bufcache.c" -o "$out/bb" \
	-lurcu-bp -lurcu-common -lcrypto -lhiredis -lpthread -lm -ldl)
names=(fresh "two/1" "again/1" "two/2" "again/2" "two/3" "again/3" "two/4" "again/4" main one-cache four-caches)
for k in 0 2 4 6 8 9 10 11; do
	valgrind --tool=callgrind --callgrind-out-file="$out/cg.$k" --toggle-collect=measured_pairs \
		"$out/bb" --child kvpool-history --pairs "$pairs" --phase "$k" >/dev/null 2>&1
	total=$(sed -n 's/^summary: //p' "$out/cg.$k")
	printf '%-12s %7.1f instructions per pair\n' "${names[$k]}" "$(echo "$total / $pairs" | bc -l)"
done
