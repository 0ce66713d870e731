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
# nothing ran.  The summary names each skipped test and why (the comment above
# its rule in its BUILD file).
set -uo pipefail
cd "$(dirname "$0")" || exit 1

usage() {
	cat <<'EOF'
usage: ./test.sh [BAZEL_TEST_OPTION...] [TARGET_PATTERN...]

Runs `bazel test` over TARGET_PATTERNs (default //...) in each configuration,
then prints a summary: per configuration the tests passed, failed and skipped
(skipped ones named, with the reason), and last "N passed, N failed".

  -h, --help          this text (exit 0); every other -option goes to `bazel test`
  KVP_CONFIGS="..."   configurations to run (default "plain asan tsan")
  KVP_BAZEL="..."     the bazel command (default "bazel")

examples:
  ./test.sh                              all three configurations
  KVP_CONFIGS=plain ./test.sh            the plain -O2 build only
  ./test.sh --nocache_test_results       rerun cached tests
  ./test.sh //tests:install_test         one target
EOF
}
for a in "$@"; do
	case "$a" in
	-h | --help) usage && exit 0 ;;
	esac
done

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

# Why //pkg:name is skipped: the comment block above its rule in pkg/BUILD
# (kvp_skip_under asks for one there), else the mechanism.
skip_reason() {
	local target=$1 cfg=$2 pkg name
	pkg=${target#//}
	pkg=${pkg%%:*}
	name=${target##*:}
	python3 - "${pkg:-.}/BUILD" "$name" "$cfg" <<'PY' 2>/dev/null || echo "not built under --config=$cfg"
import re, sys
path, name, cfg = sys.argv[1:]
lines = open(path).read().split("\n")
at = next(i for i, l in enumerate(lines) if re.search(r'name = "%s"' % re.escape(name), l))
while at > 0 and not re.match(r"[A-Za-z_][A-Za-z_0-9]*\(", lines[at]):
    at -= 1
comment = []
while at > 0 and lines[at - 1].startswith("#"):
    at -= 1
    comment.insert(0, lines[at].lstrip("# ").strip())
why = " ".join(comment) or "kvp_skip_under"
print(f"not run under --config={cfg}: {why}")
PY
}

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
	skipped=$(grep -E ' SKIPPED$' <<<"$results" | sed 's/ SKIPPED$//')
	note=""
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
		fail=$((fail + 1))
		note=" (one is the build: bazel exit $rc)"
	fi
	total_pass=$((total_pass + pass))
	total_fail=$((total_fail + fail))
	line=$(printf '%-6s %3d passed, %3d failed, %d skipped%s  (%ds)' "$cfg" "$pass" "$fail" "$skip" "$note" "$secs")
	[ -n "$failed_names" ] && line="$line"$'\n'"       failed: $failed_names"
	for t in $skipped; do
		line="$line"$'\n'"       skipped $t: $(skip_reason "$t" "$cfg")"
	done
	summary+=("$line")
done

echo
echo "=== kvpool test summary"
for s in "${summary[@]}"; do echo "$s"; done
echo "${total_pass} passed, ${total_fail} failed"
[ "$total_fail" -eq 0 ] && [ "$total_pass" -gt 0 ]
