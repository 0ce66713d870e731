#!/usr/bin/env bash
# fuzz_test.sh BINARY SEED_DIR SECONDS - run one libFuzzer target for a
# bounded time on a fresh corpus seeded from SEED_DIR; fail on any finding
# (crash, check failure, leak, sanitizer report, timeout, out of memory).
set -euo pipefail
bin=$1 seeds=$2 secs=$3
work=${TEST_TMPDIR:-$(mktemp -d)}/corpus
out=${TEST_UNDECLARED_OUTPUTS_DIR:-$work/..}
mkdir -p "$work"
echo "fuzz_test: $bin for ${secs}s, seeds $(ls "$seeds" | wc -l) from $seeds"
"$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$out/" "$work" "$seeds"
echo "fuzz_test: corpus grew to $(ls "$work" | wc -l) inputs; no finding"
