#!/usr/bin/env bash
# bench/getput_ab.sh - the get/put benchmark (`bazel run //bench:getput --
# --quick`) before and after, in one run, with the ratio printed.
#
#   bench/getput_ab.sh [BASE [ROUNDS]]      (from anywhere in the repository)
#
# BASE: the commit to compare against (default: the parent of the commit
# that moved lib/ into module folders, the first with lib/README.md).
# Builds //bench:getput twice with Bazel and the repository's .bazelrc:
#   before   at BASE, in a temporary git worktree with its own Bazel output
#            base (removed, and its server shut down, on exit)
#   after    the current tree, uncommitted changes included
# then runs the two in turns, ROUNDS times each (default 3), so that load on
# a shared machine hits both alike.  Each run is `--only getput --quick
# --json`; the script prints, per case (peer and thread count), the median
# over the rounds of the run's median ops/s, and after/before (1.00 = no
# change; above 1 the current tree is faster).
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
base=${1:-$(git -C "$repo" log --diff-filter=A --format=%H -- lib/README.md | tail -1)^}
rounds=${2:-3}
base=$(git -C "$repo" rev-parse --verify "$base^{commit}")
tmp=$(mktemp -d)
# shellcheck source=bench/ab_build.sh
. "$repo/bench/ab_build.sh"
ab_build getput "$base"

one_side() { # ROUND SIDE
	"$(ab_bin "$2")" --only getput --quick --json "$tmp/$2.$1.json" >"$tmp/$2.$1.txt" 2>&1 ||
		{ cat "$tmp/$2.$1.txt" >&2; exit 1; }
}
ab_rounds "$rounds" one_side

/usr/bin/python3 - "$tmp" "$rounds" "$(git -C "$repo" rev-parse --short "$base")" \
	"$(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD || echo ' + uncommitted changes')" <<'PY'
import json, statistics, sys
tmp, rounds, b_name, a_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def load(side, metric):
    runs = []
    for r in range(1, rounds + 1):
        with open(f"{tmp}/{side}.{r}.json") as f:
            figs = json.load(f)["figures"]
        runs.append({(g["series"], g["x"]): g["value"] for g in figs
                     if g["bench"] == "getput" and g["metric"] == metric
                     and isinstance(g["value"], (int, float))})
    return runs

def order(key):
    series, x = key
    return (series, int(x.split("=")[1]) if "=" in x else 0)

def table(metric, fmt):
    before, after = load("before", metric), load("after", metric)
    keys = sorted(set.intersection(*(set(r) for r in before + after)), key=order)
    print(f"{'case':<24} {'threads':>8} {'before':>14} {'after':>14} {'after/before':>13}")
    for k in keys:
        b = statistics.median(r[k] for r in before)
        a = statistics.median(r[k] for r in after)
        print(f"{k[0]:<24} {k[1].split('=')[-1]:>8} {b:>14{fmt}} {a:>14{fmt}} {a / b:>12.3f}x")

print(f"before = {b_name}, after = {a_name}")
print(f"\nget/put ops/s (one block allocated + freed), median of {rounds} rounds of --quick")
table("ops_per_s", ".4g")
print("(the kvpool_* rows are the library's code at each commit; the peers - dpdk_mempool,")
print(" mutex_pool, the mallocs, limit_tls_array - are the same code in both builds, so")
print(" their after/before shows how far the machine's noise moves a ratio in this run)")
print("\nkvpool / mutex_pool, each measured beside the other within one run (load that")
print("changes between runs cancels), median of the rounds")
table("ratio_vs_mutex_pool", ".3f")
PY
