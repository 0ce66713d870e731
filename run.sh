#!/usr/bin/env bash
# run.sh - kvpool's main job: the trace-driven serving replay
# (//stress:kvpool_replay), or the multi-thread stress harness
# (//stress:kvpool_stress, default settings) while the replay does not exist.
#
#   ./run.sh                                    default run
#   ./run.sh --trace ../shared/traces/conversation_trace.jsonl --speed 0
#
# Arguments go to the program unchanged, except that the paths given with
# --trace and --json (also --trace=PATH, --json=PATH) are made absolute from
# the caller's directory: `bazel run` starts the program elsewhere.
set -euo pipefail

args=()
abspath() {
	case "$1" in
	/* | -) printf '%s' "$1" ;;
	*) printf '%s/%s' "$PWD" "$1" ;;
	esac
}
while [ $# -gt 0 ]; do
	case "$1" in
	--trace | --json)
		args+=("$1")
		shift
		[ $# -gt 0 ] && { args+=("$(abspath "$1")"); shift; }
		;;
	--trace=* | --json=*)
		args+=("${1%%=*}=$(abspath "${1#*=}")")
		shift
		;;
	*)
		args+=("$1")
		shift
		;;
	esac
done

cd "$(dirname "$0")"
tools/setup.sh

target=//stress:kvpool_stress
if bazel query --noshow_progress //stress:kvpool_replay >/dev/null 2>&1; then
	target=//stress:kvpool_replay
fi
quiet=(--noshow_progress --ui_event_filters=-info --show_result=0)
bazel build "${quiet[@]}" "$target"
exec bazel run "${quiet[@]}" "$target" -- ${args[@]+"${args[@]}"}
