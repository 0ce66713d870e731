#!/usr/bin/env bash
# tests/fuzz/run.sh - long libFuzzer runs (docs/TESTING.md).
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]     default: 900 s each, all five targets
#
# Builds the targets with --config=asan (ASan + LSan + UBSan, library built
# with coverage), then runs each for SECONDS, one after another, on a
# working corpus in fuzz-work/<target>/ (kept between runs) seeded from
# tests/fuzz/corpus/<target>/.  Findings are written as
# fuzz-work/<target>-crash-* (replay: bazel-bin/tests/fuzz/<target> FILE).
# To grow the checked-in seeds: bazel-bin/tests/fuzz/<target> -merge=1
#   tests/fuzz/corpus/<target> fuzz-work/<target>   (keep them small).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-900}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(pool_fuzz bufcache_fuzz trace_fuzz kvcache_fuzz prefix_fuzz)
bazel build --config=asan "${targets[@]/#/\/\/tests\/fuzz:}"
for t in "${targets[@]}"; do
	mkdir -p "fuzz-work/$t"
	echo "=== $t for ${secs}s"
	"bazel-bin/tests/fuzz/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="fuzz-work/$t-" "fuzz-work/$t" \
		"tests/fuzz/corpus/$t" 2>&1 | grep -v '^#[0-9].*\(NEW\|REDUCE\|pulse\)' || exit 1
done
