#!/usr/bin/env bash
# tests/cli_test.sh - every program's command line (getopt_long):
#   --version  exits 0 and prints "(kvpool) X.Y.Z";
#   --help     exits 0, prints the usage with defaults on stdout;
#   an unknown option exits 2 with exactly one line on stderr, nothing on stdout;
#   a missing value exits 2 with one line;
#   --opt=value works as --opt value (a short replay and stress run).
#
#   cli_test.sh VERSION_H PROGRAM...     (VERSION_H: include/kvpool/version.h)
set -uo pipefail
version=$(sed -n 's/^#define KVP_VERSION[[:space:]]*"\(.*\)"$/\1/p' "$1")
shift
[ -n "$version" ] || { echo "FAIL: no KVP_VERSION in the header given" >&2; exit 1; }
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

for p in "$@"; do
	name=$(basename "$p")
	out=$("$p" --version 2>&1)
	rc=$?
	[ $rc -eq 0 ] || fail "$name --version exited $rc"
	grep -qF "(kvpool) $version" <<<"$out" || fail "$name --version printed '$out'"

	"$p" --help >"$tmp/help" 2>"$tmp/help.err"
	rc=$?
	[ $rc -eq 0 ] || fail "$name --help exited $rc"
	grep -q '^usage: ' "$tmp/help" || fail "$name --help: no usage line on stdout"
	grep -qi 'default' "$tmp/help" || fail "$name --help shows no defaults"
	grep -q -- '--version' "$tmp/help" || fail "$name --help does not list --version"

	"$p" --no-such-option >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ $rc -eq 2 ] || fail "$name --no-such-option exited $rc, not 2"
	[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$name --no-such-option: $(wc -l <"$tmp/err") lines: $(cat "$tmp/err")"
	grep -q -- "--no-such-option" "$tmp/err" || fail "$name: the error does not name the option"
	[ ! -s "$tmp/out" ] || fail "$name --no-such-option wrote to stdout"
	echo "ok $name: --version, --help, unknown option -> 2: $(cat "$tmp/err")"
done

for p in "$@"; do
	case "$(basename "$p")" in
	kvpool_replay)
		"$p" --speed 2>"$tmp/err"
		[ $? -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "replay --speed (no value): $(cat "$tmp/err")"
		# A flag without a value given one, and a number that is not plain
		# decimal: one line saying so, exit 2.
		"$p" --no-progress=1 2>"$tmp/err"
		[ $? -eq 2 ] && grep -qx "kvpool_replay: option --no-progress takes no value (see --help)" "$tmp/err" ||
			fail "replay --no-progress=1: $(cat "$tmp/err")"
		for v in 0x10 " 1" inf nan 1e; do
			"$p" --speed "$v" --requests 10 --no-progress >/dev/null 2>"$tmp/err"
			[ $? -eq 2 ] && grep -q "bad value for --speed" "$tmp/err" || fail "replay --speed '$v' accepted"
		done
		out=$("$p" --requests=200 --speed=0 --threads=1 --no-naive --no-progress 2>&1) ||
			fail "replay with --opt=value: $out"
		grep -q "0 failed" <<<"$out" || fail "replay with --opt=value: $out"
		echo "ok kvpool_replay --requests=200 --speed=0 --threads=1"
		# The table with the baseline: every comparable row carries a ratio, also
		# below 1x; calls and blocks are separate rows.
		out=$("$p" --requests=100 --speed=0 --threads=1 --no-progress 2>&1) || fail "replay: $out"
		for label in "allocate calls" "blocks allocated" "free calls" "wall time" \
			"allocate latency p50" "allocate latency p99 " "allocate latency p99.9" \
			"allocate+free calls per second" "exhaustion waits" "queue delay"; do
			line=$(grep -F "  $label" <<<"$out" | head -1)
			[[ "$line" =~ [0-9]x$|n/a$ ]] || fail "replay row '$label' has no ratio: '$line'"
		done
		grep -q "allocation calls" <<<"$out" && fail "the replay still says 'allocation calls'"
		echo "ok kvpool_replay: every comparable row has a ratio; calls and blocks apart"
		;;
	kvpool_stress)
		out=$("$p" --seconds=0.5 --threads=2 --seed=7 --no-progress --no-faults 2>&1) ||
			fail "stress with --opt=value: $out"
		grep -q "seed 7" <<<"$out" || fail "stress did not take --seed=7: $out"
		echo "ok kvpool_stress --seconds=0.5 --threads=2 --seed=7"
		;;
	esac
done
echo PASS
