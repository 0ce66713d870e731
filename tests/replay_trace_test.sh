#!/usr/bin/env bash
# tests/replay_trace_test.sh - short replays of each bundled trace format
# (first rows of ../shared/traces): every request completed, all blocks
# back at the end, and figures consistent with the trace rows themselves
# (token totals recomputed here from the files, independently of the C
# parser).  Also: a paced replay (--speed > 0), and a pool too small for
# some requests rejects them with a message instead of deadlocking.
set -euo pipefail
replay=$1
source "$(dirname "$0")/replay_testlib.sh"
traces=$(kvp_traces_dir)
[ -d "$traces" ] || fail "traces not found at $traces (set KVP_TRACES)"
tmp=${TEST_TMPDIR:-$(mktemp -d)}

# expected_tokens FILE FORMAT N: prompt+output tokens of the first N requests.
expected_tokens() {
	python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, fmt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tot = 0
with open(path) as f:
    if fmt != "mooncake":
        next(f)
    for i, line in enumerate(f):
        if i == n:
            break
        if fmt == "mooncake":
            o = json.loads(line)
            tot += o["input_length"] + o["output_length"]
        else:
            a = line.split(",")
            tot += int(a[1]) + int(a[2]) if fmt == "azure" else int(a[0]) + int(a[1])
print(tot)
PY
}

run_trace() { # FILE FORMAT N [extra args]
	local file=$traces/$1 fmt=$2 n=$3 json=$tmp/$2.json
	shift 3
	"$replay" --trace "$file" --limit "$n" --speed 0 --threads 2 --no-progress \
		--json "$json" "$@" >"$tmp/$fmt.out" 2>&1 || {
		cat "$tmp/$fmt.out"
		fail "$fmt replay exited $?"
	}
	expect_eq "$fmt requests completed" "$(json_get "$json" 'j["kvpool"]["requests_completed"]')" "$n"
	expect_eq "$fmt naive requests completed" "$(json_get "$json" 'j["naive"]["requests_completed"]')" "$n"
	expect_eq "$fmt checks failed" "$(json_get "$json" 'j["checks"]["failed"]')" 0
	expect_eq "$fmt blocks in use at the end" "$(json_get "$json" 'j["pool_stats"]["blocks_in_use"]')" 0
	expect_eq "$fmt frees = allocations" \
		"$(json_get "$json" 'j["pool_stats"]["n_frees"] == j["pool_stats"]["n_allocations"] > 0')" True
	local want
	want=$(expected_tokens "$file" "$fmt" "$n")
	expect_eq "$fmt tokens" \
		"$(json_get "$json" 'j["kvpool"]["prompt_tokens"] + j["kvpool"]["output_tokens"]')" "$want"
	expect_eq "$fmt naive mallocs = 2 x tokens" "$(json_get "$json" 'j["naive"]["alloc_calls"]')" $((2 * want))
	expect_eq "$fmt latency p50 <= p99 <= p99.9" \
		"$(json_get "$json" 'j["kvpool"]["alloc_latency_ns"]["p50"] <= j["kvpool"]["alloc_latency_ns"]["p99"] <= j["kvpool"]["alloc_latency_ns"]["p999"]')" True
	grep -q "checks, 0 failed" "$tmp/$fmt.out" || fail "$fmt summary line missing"
	grep -q "naive malloc/token" "$tmp/$fmt.out" || fail "$fmt baseline column missing"
}

run_trace AzureLLMInferenceTrace_conv.csv azure 300
run_trace conversation_trace.jsonl mooncake 300
run_trace arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv vidur 300

# Paced: the first 40 Mooncake requests span 12 s of trace time; at 200x, ~60 ms.
"$replay" --trace "$traces/conversation_trace.jsonl" --limit 40 --speed 200 --step-ms 20 \
	--no-naive --no-progress --json "$tmp/paced.json" >"$tmp/paced.out" 2>&1 ||
	{ cat "$tmp/paced.out"; fail "paced replay failed"; }
expect_eq "paced requests completed" "$(json_get "$tmp/paced.json" 'j["kvpool"]["requests_completed"]')" 40

# 256 blocks (128 per stream, 2048 tokens): the larger Mooncake requests cannot fit.
"$replay" --trace "$traces/conversation_trace.jsonl" --limit 30 --blocks 256 --no-progress \
	--json "$tmp/small.json" >"$tmp/small.out" 2>&1 || { cat "$tmp/small.out"; fail "small-pool replay failed"; }
rejected=$(json_get "$tmp/small.json" 'j["kvpool"]["requests_rejected"]')
done_=$(json_get "$tmp/small.json" 'j["kvpool"]["requests_completed"]')
[ "$rejected" -gt 0 ] || fail "no request rejected with a 256-block pool"
expect_eq "small pool: completed + rejected" $((rejected + done_)) 30
grep -q "rejected: it needs .* blocks per stream" "$tmp/small.out" || fail "no rejection message"
echo "ok small pool: $rejected rejected with a message, $done_ completed"
echo PASS
