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
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
trace=$(realpath "${1:-$here/../shared/traces/conversation_trace.jsonl}")
n=${2:-400}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$here" && bazel build //bench:lifecycle >/dev/null 2>&1)
cp "$here/bazel-bin/bench/lifecycle" "$out/lc"
objdump -d --no-show-raw-insn "$out/lc" >"$out/dis"
for mode in plain prefix; do
	for fn in one_kv one_mutex; do
		valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out/cg" \
			--toggle-collect=$fn "$out/lc" --only lifecycle --modes $mode --threads 1 \
			--runs 1 --quick --limit "$n" --trace "$trace" >"$out/log" 2>/dev/null
		blocks=$(sed -n 's/^blocks of [0-9]* tokens: \([0-9]*\) in all.*/\1/p' "$out/log")
		/usr/bin/python3 - "$out/cg" "$out/dis" "$blocks" "$mode" "$fn" <<'PY'
import re, sys
cg, dis, n, mode, fn = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
locks = set()
for line in open(dis):
    m = re.match(r'^\s+([0-9a-f]+):\s+(lock |xchg\s+(\S+))', line)
    # xchg %ax,%ax is the two-byte nop the assembler pads with: not locked.
    if m and not (m.group(3) and m.group(3) == '%ax,%ax'):
        locks.add(int(m.group(1), 16))
total = locked = cur = 0
skip = False
for line in open(cg):
    line = line.rstrip('\n')
    if line.startswith('summary:'):
        total = int(line.split()[1])
    if line.startswith('calls='):
        skip = True  # the next cost line is a call's inclusive cost
        continue
    m = re.match(r'^(0x[0-9a-f]+|\+\d+|-\d+|\*)\s+\S+\s+(\d+)$', line)
    if not m:
        continue
    pos, c = m.group(1), int(m.group(2))
    if pos.startswith('0x'):
        cur = int(pos, 16)
    elif pos[0] == '+':
        cur += int(pos[1:])
    elif pos[0] == '-':
        cur -= int(pos[1:])
    if skip:
        skip = False
        continue
    if cur in locks:
        locked += c
side = 'kvpool' if fn == 'one_kv' else 'mutex_blockpool'
print("%-6s %-16s %8.1f instructions, %6.3f locked (own code) per block (%d blocks)"
      % (mode, side, total / n, locked / n, n))
PY
	done
done
