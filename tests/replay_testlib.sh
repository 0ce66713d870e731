# tests/replay_testlib.sh - shared helpers of the replay/stress sh_tests (sourced).
# shellcheck shell=bash
#
# kvp_traces_dir: the shared traces.  $KVP_TRACES when set; otherwise
# ../shared/traces beside the repository this script really lives in
# (readlink -f follows Bazel's runfiles symlinks back to the source tree),
# which is where the traces sit both here and in CI.

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

kvp_traces_dir() {
	if [ -n "${KVP_TRACES:-}" ]; then
		echo "$KVP_TRACES"
		return
	fi
	local self repo
	self=$(readlink -f "${BASH_SOURCE[0]}")
	repo=$(cd "$(dirname "$self")/.." && pwd)
	echo "$repo/../shared/traces"
}

# json_get FILE EXPR: evaluate a Python expression over the parsed JSON as `j`.
json_get() {
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# expect_eq WHAT GOT WANT
expect_eq() {
	[ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
	echo "ok $1 = $3"
}

# pids: background processes to end on exit (`trap kill_pids EXIT`).
pids=()
kill_pids() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}

# metrics_port FILE: the port a tool printed to FILE as
# "metrics: http://127.0.0.1:PORT/metrics", waiting up to 10 s; "" if none.
metrics_port() {
	local port=
	for _ in $(seq 100); do
		port=$(sed -n 's|^metrics: http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$1" 2>/dev/null)
		[ -n "$port" ] && break
		sleep 0.1
	done
	echo "$port"
}
