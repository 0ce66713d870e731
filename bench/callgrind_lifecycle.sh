#!/usr/bin/env bash
# bench/callgrind_lifecycle.sh - instructions and locked instructions per block
# of the lifecycle benchmark's serving loop at one thread, kvpool and the
# mutex pool, plain and prefix, counted by callgrind (perf cannot count in
# this VM):
#
#   bench/callgrind_lifecycle.sh [TRACE [REQUESTS]]
#       TRACE: a Mooncake JSONL trace (default ../shared/traces/conversation_trace.jsonl)
#       REQUESTS: the trace's first N requests (default 400)
#
# Runs bazel-bin/bench/lifecycle (built here first) once per mode and side
# under callgrind with collection only inside that side's request function
# (one_kv or one_mutex, and what they call), so pool creation, the trace
# reader and the other side are left out.  Each request runs once (the
# warm-up eighth untimed, the rest timed), so the blocks counted are the
# work's "in all" figure.  Locked instructions (lock-prefixed, and xchg) are
# those in the executable's own code: kvpool and the mutex pool are linked
# in; calls into shared libraries (glibc's pthread_mutex_*, liburcu) count
# in the instructions but not in the locked column.
#
# With CACHE=1 callgrind also simulates the caches: a first level as
# valgrind reads it off this machine, and a last level of 512 KiB, 8-way,
# a stand-in for one core's own second level (the shared third level is
# left out).  It then prints, per block, the first-level misses and the
# 512 KiB misses (reads + writes): lines a request brings from far, which
# the instruction count does not show.  About twice as slow.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
trace=$(realpath "${1:-$here/../shared/traces/conversation_trace.jsonl}")
n=${2:-400}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$here" && bazel build //bench:lifecycle >/dev/null 2>&1)
cp "$here/bazel-bin/bench/lifecycle" "$out/lc"
objdump -d --no-show-raw-insn "$out/lc" >"$out/dis"
cache_opt=()
[ "${CACHE:-0}" = 1 ] && cache_opt=(--cache-sim=yes --LL=524288,8,64)
for mode in plain prefix; do
	for fn in one_kv one_mutex; do
		valgrind --tool=callgrind --dump-instr=yes "${cache_opt[@]}" --callgrind-out-file="$out/cg" \
			--toggle-collect=$fn "$out/lc" --only lifecycle --modes $mode --threads 1 \
			--runs 1 --quick --limit "$n" --trace "$trace" >"$out/log" 2>/dev/null
		blocks=$(sed -n 's/^blocks of [0-9]* tokens: \([0-9]*\) in all.*/\1/p' "$out/log")
		read -r total locked < <(/usr/bin/python3 "$here/bench/callgrind_locked.py" "$out/cg" "$out/dis")
		side=mutex_blockpool; [ "$fn" = one_kv ] && side=kvpool
		awk -v t="$total" -v l="$locked" -v n="$blocks" -v m="$mode" -v s="$side" \
			'BEGIN { printf "%-6s %-16s %8.1f instructions, %6.3f locked (own code) per block (%d blocks)\n", m, s, t / n, l / n, n }'
		if [ "${CACHE:-0}" = 1 ]; then
			# events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
			awk -v n="$blocks" '/^summary:/ { printf "%-23s %8.2f first-level misses, %5.2f 512 KiB misses per block\n", "", ($6 + $7) / n, ($9 + $10) / n }' "$out/cg"
		fi
	done
done
