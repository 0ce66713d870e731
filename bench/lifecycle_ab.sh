#!/usr/bin/env bash
# bench/lifecycle_ab.sh - the serving-lifecycle benchmark (suite benchmark 7)
# before and after, in one run, medians printed side by side.
#
#   bench/lifecycle_ab.sh BASE [ROUNDS [THREADS [MODES]]]   (from anywhere in the repository)
#
# BASE: the commit to compare against.  ROUNDS: runs of each build (default
# 5).  THREADS: thread counts, comma-separated (default 1,2,8).  MODES:
# plain, prefix or both (default prefix).  The trace is the benchmark's
# default (../shared/traces/conversation_trace.jsonl beside the repository),
# or $TRACE when set; $LIMIT, when set, is passed as --limit (the quick
# mode's default is the trace's first 1500 requests).
#
# Builds //bench:lifecycle twice with Bazel and the repository's .bazelrc:
#   before   at BASE, in a temporary git worktree with its own Bazel output
#            base (removed, and its server shut down, on exit)
#   after    the current tree, uncommitted changes included
# then runs the two in turns (before, after, after, before, ...), so that
# the load of a shared machine hits both alike.  Each run is `--only
# lifecycle --quick` at one thread count and mode: kvpool against the
# one-mutex pool, best of three runs a side.  Per mode and thread count the
# script prints the median over the rounds of kvpool's CPU ns a block, the
# mutex pool's, and their ratio (kvpool's blocks/s over the mutex pool's,
# as the benchmark prints it).  kvpool's CPU ns a block is the figure the
# code moves; the mutex pool's moves with the machine's memory latency, and
# the ratio with both.
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
[ $# -ge 1 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
base=$(git -C "$repo" rev-parse --verify "$1^{commit}")
rounds=${2:-5}
threads=${3:-1,2,8}
modes=${4:-prefix}
trace_opt=()
[ -n "${TRACE:-}" ] && trace_opt=(--trace "$(realpath "$TRACE")")
[ -n "${LIMIT:-}" ] && trace_opt+=(--limit "$LIMIT")
tmp=$(mktemp -d)
# shellcheck source=bench/ab_build.sh
. "$repo/bench/ab_build.sh"
ab_build lifecycle "$base"

one_side() { # ROUND SIDE
	local bin t m
	bin=$(ab_bin "$2")
	for t in ${threads//,/ }; do
		for m in ${modes//,/ }; do
			# Run from the repository: the default trace lies beside it.
			(cd "$repo" && "$bin" --only lifecycle --quick --modes "$m" \
				--threads "$t" "${trace_opt[@]}") >"$tmp/out" 2>&1 ||
				{ cat "$tmp/out" >&2; exit 1; }
			# "threads kvpool mutex ratio scaling kv-ns mx-ns ..." rows
			awk -v s="$2" -v m="$m" -v t="$t" \
				'$1 == t && NF >= 9 && $4 ~ /x$/ { print s, m, t, $4, $6, $7 }' \
				"$tmp/out" >>"$tmp/rows"
		done
	done
}
ab_rounds "$rounds" one_side

/usr/bin/python3 - "$tmp/rows" "$(git -C "$repo" rev-parse --short "$base")" \
	"$(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD || echo ' + uncommitted changes')" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"before: {sys.argv[2]}   after: {sys.argv[3]}   medians over rounds")
print(f"{'mode':<7} {'threads':>7} {'kv ns/b before':>15} {'after':>7} {'mx ns/b before':>15} "
      f"{'after':>7} {'ratio before':>13} {'after':>7}")
keys = sorted({(r[1], int(r[2])) for r in rows})
for mode, t in keys:
    def med(side, col):
        v = [float(r[col].rstrip('x')) for r in rows if r[0] == side and r[1] == mode and int(r[2]) == t]
        return statistics.median(v) if v else float('nan')
    print(f"{mode:<7} {t:>7} {med('before', 4):>15.1f} {med('after', 4):>7.1f} "
          f"{med('before', 5):>15.1f} {med('after', 5):>7.1f} {med('before', 3):>12.2f}x {med('after', 3):>6.2f}x")
PY
