#!/usr/bin/env bash
# tests/replay_prefix_test.sh - kvpool_replay --prefix-cache on the first
# Mooncake rows (../shared/traces): with a pool that holds every block and
# one request at a time, the hit rate equals the ideal (unbounded cache)
# rate, and that ideal equals one computed here from the file's hash_ids
# independently of the C code; under concurrency and a small pool (cached
# blocks evicted) every check still passes and no hit exceeds the ideal;
# with --storage the naive baseline runs and passes its checks too; traces
# without hashes are refused with one line and exit 2.
set -euo pipefail
replay=$1
source "$(dirname "$0")/replay_testlib.sh"
traces=$(kvp_traces_dir)
[ -d "$traces" ] || fail "traces not found at $traces (set KVP_TRACES)"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
moon=$traces/conversation_trace.jsonl
n=300

# ideal FILE N BS: hit rate of an unbounded cache of BS-token blocks, from the
# hash_ids (block j of a prompt is named by the hash ids before its chunk and
# its position in the chunk; the rows are in arrival order in this file).
ideal() {
	python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, n, bs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seen, full, hits = set(), 0, 0
with open(path) as f:
    for i, line in enumerate(f):
        if i == n:
            break
        o = json.loads(line)
        ids, nfull = o["hash_ids"], o["input_length"] // bs
        full += nfull
        for j in range(min(nfull, len(ids) * 512 // bs)):
            t0 = j * bs
            name = (tuple(ids[: (t0 + bs - 1) // 512 + 1]), t0 % 512)
            hits += name in seen
            seen.add(name)
print(f"{hits / full:.6f}")
PY
}

run() { # NAME [args]
	local name=$1
	shift
	"$replay" --trace "$moon" --limit "$n" --speed 0 --prefix-cache --no-naive --no-progress \
		--json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>&1 || {
		cat "$tmp/$name.out"
		fail "$name: replay exited $?"
	}
	expect_eq "$name: checks failed" "$(json_get "$tmp/$name.json" 'j["checks"]["failed"]')" 0
	expect_eq "$name: requests completed" "$(json_get "$tmp/$name.json" 'j["kvpool"]["requests_completed"]')" "$n"
	expect_eq "$name: hit rate <= ideal" \
		"$(json_get "$tmp/$name.json" 'j["prefix"]["prefix_hit_rate"] <= j["prefix"]["prefix_ideal_hit_rate"]')" True
}

want=$(ideal "$moon" "$n" 16)
# 1. Everything fits, one request at a time: every repeated block is found.
run all --threads 1 --batch 1 --blocks 1200000
expect_eq "ideal rate = the file's" "$(json_get "$tmp/all.json" '"%.6f" % j["prefix"]["prefix_ideal_hit_rate"]')" "$want"
expect_eq "hit rate = ideal" "$(json_get "$tmp/all.json" 'j["prefix"]["prefix_hit_rate"] == j["prefix"]["prefix_ideal_hit_rate"] > 0')" True
expect_eq "no eviction" "$(json_get "$tmp/all.json" 'j["prefix"]["evictions"]')" 0
expect_eq "prefill tokens saved = 16 x matched" \
	"$(json_get "$tmp/all.json" 'j["prefix"]["prefill_tokens_saved"] == 16 * j["prefix"]["matched_blocks"]')" True

# 2. Other block size (not a divisor of the chunk: blocks straddle hash ids).
want48=$(ideal "$moon" "$n" 48)
run bs48 --threads 1 --batch 1 --blocks 400000 --block-size 48
expect_eq "bs 48: hit rate = ideal = the file's" \
	"$(json_get "$tmp/bs48.json" '"%.6f %.6f" % (j["prefix"]["prefix_hit_rate"], j["prefix"]["prefix_ideal_hit_rate"])')" "$want48 $want48"

# 3. Concurrency and a small pool: cached blocks are evicted, nothing breaks.
run small --threads 2 --batch 16 --blocks 40000 --storage --head-dim 8
expect_eq "small pool: evictions happened" "$(json_get "$tmp/small.json" 'j["prefix"]["evictions"] > 0')" True
expect_eq "small pool: some hits" "$(json_get "$tmp/small.json" 'j["prefix"]["matched_blocks"] > 0')" True

# 4. With --storage and the naive baseline on: the naive run is valid too
#    (it once inherited the content checks, which need a prefix cache, and
#    was refused as a bad configuration).
"$replay" --trace "$moon" --limit 100 --speed 0 --prefix-cache --storage --head-dim 8 \
	--threads 2 --no-progress --json "$tmp/naive.json" >"$tmp/naive.out" 2>&1 || {
	cat "$tmp/naive.out"
	fail "naive: replay exited $?"
}
expect_eq "naive: checks failed" "$(json_get "$tmp/naive.json" 'j["checks"]["failed"]')" 0
expect_eq "naive: requests completed" "$(json_get "$tmp/naive.json" 'j["naive"]["requests_completed"]')" 100

# 5. Traces without hashes: one line, exit 2.
for f in AzureLLMInferenceTrace_conv.csv arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv; do
	set +e
	"$replay" --trace "$traces/$f" --limit 5 --prefix-cache --no-progress >"$tmp/refuse.out" 2>&1
	rc=$?
	set -e
	expect_eq "$f refused: exit" "$rc" 2
	expect_eq "$f refused: one line" "$(wc -l <"$tmp/refuse.out")" 1
	grep -q "prefix-cache needs a Mooncake trace with hash_ids" "$tmp/refuse.out" || fail "$f: message"
done
echo PASS
