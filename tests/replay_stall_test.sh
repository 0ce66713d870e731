#!/usr/bin/env bash
# tests/replay_stall_test.sh - a waiting head request holds nothing that
# admitted requests were promised (kvpool_replay --prefix-cache).
#
# A made-up trace, 16-token blocks, 180 blocks per stream, one worker:
#   0: 1024-token prompt (hash ids 1, 2), 1 output token: 65 blocks; its
#      64 full prompt blocks are published, then cached when it ends;
#   1: 16-token prompt, 2000 output tokens: 126 blocks, admitted once 0 ended;
#   2: 2048-token prompt (hash ids 1, 2, 3, 4), 16 output tokens: 129 blocks,
#      its first 64 prompt blocks are 0's cached ones.
# When 2 reaches the head, 1 has still 126 blocks to allocate and 180 are
# free (64 of them cached): 2 does not fit yet.  Had 2 matched its prefix
# and waited holding it, the 64 revived blocks would have left the free
# ones, and 1 would have found the pool exhausted 10 blocks before its
# end: an unexpected exhaustion and a stall.  The head must wait holding
# nothing, and every request must complete with no unexpected exhaustion.
set -euo pipefail
replay=$1
source "$(dirname "$0")/replay_testlib.sh"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
cat >"$tmp/stall.jsonl" <<'T'
{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 0, "input_length": 16, "output_length": 2000, "hash_ids": [10]}
{"timestamp": 0, "input_length": 2048, "output_length": 16, "hash_ids": [1, 2, 3, 4]}
T
for i in 1 2 3; do
	"$replay" --trace "$tmp/stall.jsonl" --speed 0 --prefix-cache --no-naive --no-progress \
		--threads 1 --batch 2 --blocks 360 --block-size 16 --json "$tmp/stall.json" \
		>"$tmp/stall.out" 2>&1 || {
		rc=$?
		cat "$tmp/stall.out"
		fail "run $i: replay exited $rc"
	}
	expect_eq "run $i: requests completed" "$(json_get "$tmp/stall.json" 'j["kvpool"]["requests_completed"]')" 3
	expect_eq "run $i: unexpected exhaustions" "$(json_get "$tmp/stall.json" 'j["kvpool"]["unexpected_exhausted"]')" 0
	expect_eq "run $i: errors" "$(json_get "$tmp/stall.json" 'j["kvpool"]["errors"]')" 0
	expect_eq "run $i: checks failed" "$(json_get "$tmp/stall.json" 'j["checks"]["failed"]')" 0
	# the head did wait, and its prefix (less what 1 evicted) was matched
	expect_eq "run $i: the head waited" "$(json_get "$tmp/stall.json" 'j["kvpool"]["exhaustion_waits"] >= 1')" True
	expect_eq "run $i: 2's prefix matched" "$(json_get "$tmp/stall.json" 'j["prefix"]["matched_blocks"] > 0')" True
done
echo "ok: no stall"
