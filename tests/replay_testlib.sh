# tests/replay_testlib.sh - shared helpers of the replay/stress sh_tests (sourced).
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
