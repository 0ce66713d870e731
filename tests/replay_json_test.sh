#!/usr/bin/env bash
# tests/replay_json_test.sh - the --json files of kvpool_replay and
# kvpool_stress are valid JSON whatever the input, and carry the version.
#
#   replay_json_test.sh REPLAY STRESS VERSION_H
#
# 1. A trace whose path holds bytes that are not UTF-8 (0xFF, a cut-off 0xC3):
#    the file parses (Python's json, strict UTF-8), "source" spells the bytes
#    as \xFF and \xC3, "version" is KVP_VERSION of the headers, and the
#    pool's peak_bytes_sampled is its sampled peak blocks times the bytes of
#    a block (it was 0 while the table showed MiB).
# 2. --limit 0 is refused (exit 2) with the accepted range; --threads 100000
#    of the stress harness names its range too.
# 3. kvpool_stress --json parses and carries "version".
set -euo pipefail
replay=$1 stress=$2
version=$(sed -n 's/^#define KVP_VERSION[[:space:]]*"\(.*\)"$/\1/p' "$3")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
py=/usr/bin/python3

# 1. 400 rows of an Azure-format trace over 0.4 s, replayed in real time (the
#    monitor samples every 2 ms, so it sees the peak) under a path that is not UTF-8.
trace="$tmp/tr$(printf '\xff')ce$(printf '\xc3').csv"
{
	echo "TIMESTAMP,ContextTokens,GeneratedTokens"
	for i in $(seq 0 399); do
		printf '2023-11-16 18:15:46.%06d,%d,%d\n' $((i * 1000)) $((100 + i % 50 * 7)) $((20 + i % 30))
	done
} >"$trace"
"$replay" --trace "$trace" --speed 1 --no-progress --json "$tmp/r.json" >"$tmp/r.out" 2>&1 ||
	{ cat "$tmp/r.out" >&2; fail "replay exited $?"; }
"$py" - "$tmp/r.json" "$version" <<'PY' || fail "replay --json"
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:  # strict: invalid UTF-8 raises
    d = json.load(f)
assert d["program"] == "kvpool_replay", d["program"]
assert d["version"] == sys.argv[2], (d["version"], sys.argv[2])
assert "tr\\xFFce\\xC3.csv" in d["source"], d["source"]
k, c = d["kvpool"], d["config"]
block_bytes = d["pool_stats"]["peak_kv_bytes"] // max(d["pool_stats"]["peak_blocks_in_use"], 1)
assert k["peak_blocks_sampled"] > 0, k
assert k["peak_bytes_sampled"] == k["peak_blocks_sampled"] * block_bytes, (k, block_bytes)
assert d["naive"]["peak_bytes_sampled"] > 0
print("ok replay --json: valid with a non-UTF-8 trace path; source", repr(d["source"][:40]),
      "version", d["version"], "peak_bytes_sampled", k["peak_bytes_sampled"])
PY

# 2. Out-of-range numbers name the range.
set +e
"$replay" --limit 0 --no-progress >"$tmp/l.out" 2>"$tmp/l.err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "--limit 0 exited $rc, expected 2"
grep -qF "bad value for --limit: '0' (an integer in [1, " "$tmp/l.err" ||
	{ cat "$tmp/l.err" >&2; fail "--limit 0: message"; }
set +e
"$stress" --threads 100000 >"$tmp/t.out" 2>"$tmp/t.err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "--threads 100000 exited $rc, expected 2"
grep -qE "bad value for --threads: '100000' \(an integer in \[1, [0-9]+\]\)" "$tmp/t.err" ||
	{ cat "$tmp/t.err" >&2; fail "--threads 100000: message"; }
echo "ok ranges: $(cat "$tmp/l.err"); $(cat "$tmp/t.err")"

# 3. The stress harness's file.
"$stress" --threads 2 --seconds 1 --seed 1 --json "$tmp/s.json" >"$tmp/s.out" 2>&1 ||
	{ tail "$tmp/s.out" >&2; fail "stress exited $?"; }
"$py" - "$tmp/s.json" "$version" <<'PY' || fail "stress --json"
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    d = json.load(f)
assert d["program"] == "kvpool_stress" and d["version"] == sys.argv[2], d
assert d["operations"] > 0 and d["checks_failed"] == 0, d
print("ok stress --json:", d["operations"], "operations, version", d["version"])
PY
