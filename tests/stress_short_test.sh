#!/usr/bin/env bash
# tests/stress_short_test.sh - a short kvpool_stress run: 4 threads for a
# few seconds, with fault injection; it must pass every invariant check,
# print its seed, and run a positive number of operations and checks.
# A second run bounded by --ops must run exactly that many operations.
set -uo pipefail
stress=$1
source "$(dirname "$0")/replay_testlib.sh"
tmp=${TEST_TMPDIR:-$(mktemp -d)}

"$stress" --threads 4 --seconds 3 --seed 20240521 --no-progress --json "$tmp/s.json" >"$tmp/s.out" 2>&1
rc=$?
cat "$tmp/s.out"
[ $rc -eq 0 ] || fail "kvpool_stress exited $rc"
grep -q "^kvpool_stress: seed 20240521 " "$tmp/s.out" || fail "seed not printed"
grep -q "^PASS: no violation" "$tmp/s.out" || fail "no PASS line"
expect_eq "violations" "$(json_get "$tmp/s.json" 'j["violations"]')" 0
expect_eq "checks ran" "$(json_get "$tmp/s.json" 'j["checks_run"] > 0 and j["checks_failed"] == 0')" True
expect_eq "operations ran" "$(json_get "$tmp/s.json" 'j["operations"] > 0')" True
expect_eq "fault phases ran" "$(json_get "$tmp/s.json" 'j["fault_phases"] > 0')" True
expect_eq "allocations and frees balance" "$(json_get "$tmp/s.json" 'j["blocks_allocated"] == j["blocks_freed"] > 0')" True

"$stress" --threads 3 --ops 20000 --seconds 0 --seed 7 --no-progress --json "$tmp/o.json" >"$tmp/o.out" 2>&1 ||
	{ cat "$tmp/o.out"; fail "--ops run failed"; }
expect_eq "--ops bound" "$(json_get "$tmp/o.json" 'j["operations"]')" 20000
echo PASS
