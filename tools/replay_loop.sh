#!/usr/bin/env bash
# tools/replay_loop.sh - run the prefix-cache replay N times; print every failure.
#
#   tools/replay_loop.sh N [extra kvpool_replay args]
#
# Runs, N times:
#   kvpool_replay --trace ../shared/traces/conversation_trace.jsonl --speed 0
#       --prefix-cache --no-naive --limit 3000 --threads 4 --no-progress
# (the extra args are appended).  A run fails when it exits nonzero, when a
# check fails, or when it counts an unexpected exhaustion or an error.  Each
# failure is printed with its first lines of output; the last line is
#   N runs, F failed, U unexpected exhaustions, E errors
# and the exit status is 1 when F > 0.
#
# Environment: KVP_REPLAY (default bazel-bin/stress/kvpool_replay, built
# with `bazel build //stress:kvpool_replay`), KVP_TRACES (default
# ../shared/traces beside the repository).
set -uo pipefail
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
	echo "usage: $0 N [extra kvpool_replay args]" >&2
	exit 2
fi
n=$1
shift
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
replay=${KVP_REPLAY:-$root/bazel-bin/stress/kvpool_replay}
traces=${KVP_TRACES:-$root/../shared/traces}
[ -x "$replay" ] || { echo "$0: no $replay (bazel build //stress:kvpool_replay)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

failed=0 unexpected=0 errors=0
for i in $(seq 1 "$n"); do
	"$replay" --trace "$traces/conversation_trace.jsonl" --speed 0 --prefix-cache --no-naive \
		--limit 3000 --threads 4 --no-progress --json "$tmp/run.json" "$@" >"$tmp/run.out" 2>&1
	rc=$?
	read -r cf ue er < <(python3 - "$tmp/run.json" <<'PY' 2>/dev/null || echo "? ? ?"
import json, sys
j = json.load(open(sys.argv[1]))
print(j["checks"]["failed"], j["kvpool"]["unexpected_exhausted"], j["kvpool"]["errors"])
PY
	)
	if [ "$rc" -ne 0 ] || [ "$cf" != 0 ] || [ "$ue" != 0 ] || [ "$er" != 0 ]; then
		failed=$((failed + 1))
		echo "run $i: exit $rc, checks failed $cf, unexpected exhaustions $ue, errors $er"
		head -n 20 "$tmp/run.out" | sed 's/^/    /'
	fi
	[[ $ue =~ ^[0-9]+$ ]] && unexpected=$((unexpected + ue))
	[[ $er =~ ^[0-9]+$ ]] && errors=$((errors + er))
	rm -f "$tmp/run.json"
done
echo "$n runs, $failed failed, $unexpected unexpected exhaustions, $errors errors"
[ "$failed" -eq 0 ]
