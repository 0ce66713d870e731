#!/usr/bin/env bash
# tests/replay_reliability_test.sh - kvpool_replay given what a careless or
# hostile user gives it.  Each case failed before its fix:
#   - /dev/zero was read until memory ran out, then called "empty file";
#   - a read error (getline out of memory on a huge line, reproduced under
#     `ulimit -v` in the plain build) was taken for the end of the file: the
#     rows before it replayed and the run passed with exit 0;
#   - rows dated 1900 and 2200 overflowed int64 (UBSan, asan config);
#   - --speed 1e-300 was accepted and the run waited forever;
#   - --json to an unwritable path failed only after the whole run, with
#     no reason; --trace - looked for a file named "-".
#   - kvpool_stress --seconds took NaN, inf, -1 and 1e300 (the deadline
#     then overflowed a float-to-integer conversion).
# Usage: replay_reliability_test.sh REPLAY CONFIG (none | asan | tsan) [STRESS]
set -uo pipefail
replay=$1
config=${2:-none}
stress=${3:-}
source "$(dirname "$0")/replay_testlib.sh"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
AZ='TIMESTAMP,ContextTokens,GeneratedTokens'
ROW='2023-11-16 18:15:46.6805900,374,44'
run() { timeout 60 "$replay" --no-progress --no-naive "$@"; }

# Address space bound for the cases whose failure mode was running out of
# memory (not under a sanitizer: their shadow memory needs terabytes).
limit=""
[ "$config" = none ] && limit="ulimit -v 800000;"

# /dev/zero: one endless line of NULs.
bash -c "$limit exec \"\$0\" --no-progress --no-naive --trace /dev/zero" "$replay" \
	>"$tmp/zero.out" 2>"$tmp/zero.err"
rc=$?
[ $rc -eq 2 ] || { cat "$tmp/zero.err"; fail "/dev/zero: exit $rc, expected 2"; }
grep -qF "/dev/zero:1: line longer than 1048576 bytes" "$tmp/zero.err" ||
	{ cat "$tmp/zero.err"; fail "/dev/zero: wrong message"; }
echo "ok /dev/zero: $(cat "$tmp/zero.err")"

# Three good rows, then a line of 900 MB (more than the address space
# limit): an error, never a replay of the three rows.
big=900000000
[ "$config" = none ] || big=3000000
bash -c "$limit exec \"\$0\" --no-progress --no-naive --trace <(printf '%s\n%s\n%s\n%s\n' '$AZ' '$ROW' '$ROW' '$ROW'; head -c $big /dev/zero | tr '\\\\0' 7)" \
	"$replay" >"$tmp/huge.out" 2>"$tmp/huge.err"
rc=$?
[ $rc -eq 2 ] || { cat "$tmp/huge.err" "$tmp/huge.out"; fail "huge line: exit $rc, expected 2"; }
grep -qF ":5: line longer than 1048576 bytes" "$tmp/huge.err" ||
	{ cat "$tmp/huge.err"; fail "huge line: wrong message"; }
echo "ok huge line: $(cat "$tmp/huge.err")"

# A read error in the middle of the file (a directory reads as EISDIR).
mkdir -p "$tmp/adir"
run --trace "$tmp/adir" >/dev/null 2>"$tmp/dir.err"
rc=$?
[ $rc -eq 2 ] && grep -qF "read error" "$tmp/dir.err" || { cat "$tmp/dir.err"; fail "read error: exit $rc"; }
echo "ok read error: $(cat "$tmp/dir.err")"

# Rows 300 years apart: arrivals exact, no overflow (UBSan would stop here).
printf '%s\n%s\n%s\n' "$AZ" '2200-12-31 23:59:59.999999999,10,1' '1900-01-01 00:00:00,10,1' >"$tmp/span.csv"
run --trace "$tmp/span.csv" --speed 0 --json "$tmp/span.json" >"$tmp/span.out" 2>&1 ||
	{ cat "$tmp/span.out"; fail "1900..2200 trace"; }
echo "ok 1900..2200 trace replays"

# Numeric flags out of range are usage errors, at once.
for bad in "--speed 1e-300" "--speed 1e300" "--speed -1" "--speed nan" "--speed inf" \
	"--step-ms -5" "--step-ms 1e300" "--rate 0" "--rate 1e300" "--threads 0" "--batch 0" \
	"--blocks 1" "--block-size 0" "--head-dim 0" "--requests 0" "--metrics-port 65536"; do
	# shellcheck disable=SC2086
	run --requests 10 $bad >/dev/null 2>"$tmp/flag.err"
	rc=$?
	[ $rc -eq 2 ] || fail "$bad: exit $rc, expected 2"
	grep -qF "bad value for ${bad%% *}" "$tmp/flag.err" || { cat "$tmp/flag.err"; fail "$bad: message"; }
done
echo "ok out-of-range flags refused"
if [ -n "$stress" ]; then
	for bad in nan inf -1 1e300 1e8; do
		timeout 20 "$stress" --seconds "$bad" --no-progress >/dev/null 2>"$tmp/sflag.err"
		rc=$?
		[ $rc -eq 2 ] || fail "kvpool_stress --seconds $bad: exit $rc, expected 2"
	done
	echo "ok kvpool_stress --seconds out of range refused"
fi
# A small speed in range still starts and ends (one row at time 0, no step time).
printf '%s\n%s\n' "$AZ" "$ROW" >"$tmp/one.csv"
run --trace "$tmp/one.csv" --speed 1e-6 --step-ms 0 >/dev/null 2>&1 || fail "--speed 1e-6 on a one-row trace"
echo "ok --speed 1e-6"

# --json to an unwritable path: refused before the run, with the reason.
start=$SECONDS
run --requests 200000 --json "$tmp/no/such/dir/out.json" >"$tmp/json.out" 2>"$tmp/json.err"
rc=$?
[ $rc -eq 2 ] || fail "--json unwritable: exit $rc, expected 2"
grep -qF "out.json: cannot write: No such file or directory" "$tmp/json.err" ||
	{ cat "$tmp/json.err"; fail "--json: no reason given"; }
grep -q "checks" "$tmp/json.out" && fail "--json: the run happened before the error"
echo "ok --json unwritable refused up front in $((SECONDS - start)) s: $(cat "$tmp/json.err")"

# --trace - reads the standard input.
printf '%s\n%s\n%s\n' "$AZ" "$ROW" "$ROW" | run --trace - --json "$tmp/stdin.json" >"$tmp/stdin.out" 2>&1 ||
	{ cat "$tmp/stdin.out"; fail "--trace -"; }
expect_eq "--trace - requests completed" "$(json_get "$tmp/stdin.json" 'j["kvpool"]["requests_completed"]')" 2
echo PASS
