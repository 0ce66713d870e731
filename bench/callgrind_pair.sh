#!/usr/bin/env bash
# bench/callgrind_pair.sh - instructions and locked instructions per one-block
# pair, counted by callgrind (perf cannot count in this VM), for the tree in
# the current directory or the one given:
#
#   bench/callgrind_pair.sh [TREE]      (TREE: a checkout of kvpool; default .)
#
# Builds TREE's lib/*.c with bench/pair_count.c from this checkout (the same
# clang flags as the plain Bazel build), runs 100,000 full-API pairs and
# 100,000 raw pairs under callgrind with collection only inside pair_loop,
# (and 100,000 one-block requests of a new owner each, allocate + free_all,
# with the caller's ids and with ids from kvp_owner_new)
# and prints Ir per pair and the locked instructions (lock-prefixed, and
# xchg) executed per pair in the executable's own code (calls into shared
# libraries - glibc's pthread_mutex_*, liburcu - are counted in Ir but their
# locked instructions are not).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tree=$(cd "${1:-.}" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$tree" && clang -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_FORTIFY_SOURCE=2 \
	-fstack-protector -fno-omit-frame-pointer -Iinclude -I. $(find lib -name "*.c") "$here/bench/pair_count.c" \
	-o "$out/pc" -lurcu-bp -lurcu-common -lcrypto -lhiredis -lpthread -lm)
n=100000
for mode in full raw newowner minted; do
	valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out/cg.$mode" \
		--toggle-collect=pair_loop "$out/pc" "$mode" "$n" >/dev/null 2>&1
	objdump -d --no-show-raw-insn "$out/pc" >"$out/dis"
	read -r total locked < <(/usr/bin/python3 "$here/bench/callgrind_locked.py" "$out/cg.$mode" "$out/dis")
	awk -v t="$total" -v l="$locked" -v n="$n" -v m="$mode" \
		'BEGIN { printf "%-8s pair: %.0f instructions, %.2f locked instructions (own code) per pair\n", m, t / n, l / n }'
done
