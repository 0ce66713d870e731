#!/usr/bin/env bash
# bench/shared_writes.sh - which of the library's atomic writes land on a
# cache line another thread wrote last, by call site
# (lib/testing/shared_writes.h says what it counts and what it does not):
#
#   bench/shared_writes.sh [ARGS...]      (ARGS: bench/lifecycle's)
#   SHARED_WRITES_TARGET=pair_count bench/shared_writes.sh minted 1000000 2
#
# e.g. bench/shared_writes.sh --only lifecycle --modes prefix --threads 2
#        --runs 1 --trace .../AzureLLMInferenceTrace_conv.csv
#
# Builds //bench:lifecycle (or the //bench target SHARED_WRITES_TARGET
# names) with that header forced in front of every lib/
# file, in an output base of its own (the normal build is left alone), runs
# it with ARGS, and prints its output, then the sites with the most such
# writes.  Compare two thread counts: at one thread there are none.  Timings
# printed under it mean nothing (the bookkeeping is a shared table).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${SHARED_WRITES_OUTPUT_BASE:-/tmp/kvpool_shared_writes_ob}
target=${SHARED_WRITES_TARGET:-lifecycle}
cd "$root"
bazel --output_base="$base" build -c opt \
	--per_file_copt='lib/.*\.c@-include,lib/testing/shared_writes.h,-Wno-error' \
	"//bench:$target" >/dev/null 2>&1 || {
	echo "shared_writes: the instrumented build failed" >&2
	exit 1
}
exe=$(bazel --output_base="$base" info -c opt bazel-bin 2>/dev/null)/bench/$target
"$exe" "$@"
