#!/usr/bin/env bash
# bench/ab_build.sh - sourced by the before/after scripts (getput_ab.sh,
# lifecycle_ab.sh): builds one Bazel target at a base commit and on the
# current tree, and runs the two in turns.
#
#   ab_build TARGET BASE
#   ab_rounds ROUNDS FN      (below)
#
# Needs $repo (the repository) and $tmp (a scratch directory of the
# caller's, removed by ab_cleanup, which it sets as the EXIT trap).  Builds
# //bench:TARGET at BASE in a temporary git worktree with its own Bazel
# output base, and on the current tree (uncommitted changes included) with
# the repository's; sets $before and $after to the two programs, left where
# Bazel put them (a suite program finds its helper programs beside it).
#
# shellcheck disable=SC2154,SC2034  # $repo, $tmp come from the caller; $before, $after go to it

ab_cleanup() {
	if [ -d "$tmp/tree" ]; then
		(cd "$tmp/tree" && bazel --output_base="$tmp/ob" shutdown) >/dev/null 2>&1 || true
		git -C "$repo" worktree remove --force "$tmp/tree" >/dev/null 2>&1 || true
	fi
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
}

ab_build() {
	local target=$1 base=$2
	trap ab_cleanup EXIT
	echo "building //bench:$target at $(git -C "$repo" rev-parse --short "$base") (before) and the current tree (after)"
	git -C "$repo" worktree add --detach "$tmp/tree" "$base" >/dev/null 2>&1
	(cd "$tmp/tree" && bazel --output_base="$tmp/ob" build "//bench:$target" >"$tmp/build-before.log" 2>&1) ||
		{ cat "$tmp/build-before.log" >&2; exit 1; }
	(cd "$repo" && bazel build "//bench:$target" >"$tmp/build-after.log" 2>&1) ||
		{ cat "$tmp/build-after.log" >&2; exit 1; }
	before="$tmp/tree/bazel-bin/bench/$target"
	after="$repo/bazel-bin/bench/$target"
}

# ab_rounds ROUNDS FN: call FN ROUND SIDE for every round and side, the two
# sides in turns (before after, then after before: drift in the machine's
# load hits both alike), with the load average at start, end and each round.
ab_rounds() {
	local rounds=$1 fn=$2 r side order
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	for ((r = 1; r <= rounds; r++)); do
		order="before after"
		((r % 2 == 0)) && order="after before"
		for side in $order; do
			"$fn" "$r" "$side"
		done
		echo "  round $r done (load $(cut -d' ' -f1 /proc/loadavg))"
	done
	echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# ab_bin SIDE: the program of SIDE (before or after)
ab_bin() {
	if [ "$1" = after ]; then echo "$after"; else echo "$before"; fi
}
