#!/usr/bin/env bash
# test.sh - kvpool's whole test suite: `bazel test //...` in three configurations.
#
#   ./test.sh                         plain -O2, --config=asan (ASan+LSan+UBSan), --config=tsan
#   ./test.sh --nocache_test_results  options go to every `bazel test` (here: rerun cached tests)
#   ./test.sh //tests:foo_test        target patterns replace //...
#   KVP_CONFIGS="plain tsan" ./test.sh   run only some configurations
#   KVP_BAZEL="bazel --output_base=$HOME/.cache/bazel-me" ./test.sh   another Bazel server
#
# Counting: every test target Bazel reports in its summary counts once per
# configuration - PASSED (also "(cached) PASSED") as passed; SKIPPED (not
# compatible with the config: kvp_skip_under in tests/defs.bzl) as neither;
# FAILED, TIMEOUT, FLAKY (it failed at least once), NO STATUS, FAILED TO BUILD,
# INCOMPLETE and anything else as failed.  A configuration whose build or analysis failed (Bazel exit status
# other than 0 "all passed" and 3 "some tests failed") counts one more failure,
# so a broken build never vanishes from the count.  The last line is always
# "N passed, N failed"; the exit status is non-zero when anything failed or
# nothing ran.
set -uo pipefail
cd "$(dirname "$0")" || exit 1

tools/setup.sh || { echo "test.sh: tools/setup.sh failed"; echo "0 passed, 1 failed"; exit 1; }

opts=()
patterns=()
for a in "$@"; do
	case "$a" in
	-*) opts+=("$a") ;;
	*) patterns+=("$a") ;;
	esac
done
[ ${#patterns[@]} -gt 0 ] || patterns=(//...)

configs=${KVP_CONFIGS:-plain asan tsan}
read -ra bazel <<<"${KVP_BAZEL:-bazel}"
logdir=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-test.XXXXXX")
trap 'rm -rf "$logdir"' EXIT

total_pass=0
total_fail=0
summary=()
for cfg in $configs; do
	case "$cfg" in
	plain) cfgopt=() ;;
	asan | tsan) cfgopt=("--config=$cfg") ;;
	*) echo "test.sh: unknown configuration '$cfg' (plain, asan, tsan)"; total_fail=$((total_fail + 1)); continue ;;
	esac
	log="$logdir/$cfg.log"
	echo "=== bazel test ${cfgopt[*]:-(plain)} ${patterns[*]}"
	start=$SECONDS
	"${bazel[@]}" test --color=no --curses=no --keep_going ${cfgopt[@]+"${cfgopt[@]}"} \
		${opts[@]+"${opts[@]}"} -- "${patterns[@]}" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$((SECONDS - start))

	# Per-target summary lines: "//pkg:name   [(cached) ]STATUS[ in 1.2s]".
	results=$(grep -E '^//[^ ]+ +(\(cached\) )?[A-Z]' "$log" |
		sed -E 's/^(\/\/[^ ]+) +(\(cached\) )?([A-Z][A-Z ]*[A-Z]).*/\1 \3/')
	pass=$(grep -cE ' PASSED$' <<<"$results")
	skip=$(grep -cE ' SKIPPED$' <<<"$results")
	fail=$(grep -vcE ' PASSED$| SKIPPED$|^$' <<<"$results")
	failed_names=$(grep -vE ' PASSED$| SKIPPED$|^$' <<<"$results" | tr '\n' ';' | sed 's/;$//; s/;/; /g')
	note=""
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
		fail=$((fail + 1))
		note=" (one is the build: bazel exit $rc)"
	fi
	total_pass=$((total_pass + pass))
	total_fail=$((total_fail + fail))
	line=$(printf '%-6s %3d passed, %3d failed, %d skipped%s  (%ds)' "$cfg" "$pass" "$fail" "$skip" "$note" "$secs")
	[ -n "$failed_names" ] && line="$line"$'\n'"       failed: $failed_names"
	summary+=("$line")
done

echo
echo "=== kvpool test summary"
for s in "${summary[@]}"; do echo "$s"; done
echo "${total_pass} passed, ${total_fail} failed"
[ "$total_fail" -eq 0 ] && [ "$total_pass" -gt 0 ]
