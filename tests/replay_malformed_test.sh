#!/usr/bin/env bash
# tests/replay_malformed_test.sh - kvpool_replay given malformed traces:
# truncated line, negative and non-numeric token counts, empty file, in
# each format.  Each must end with exit status 2 (never a signal) and one
# clear message naming the file, the line and what was wrong; with
# --on-error skip the good rows replay and the bad ones are counted.
set -uo pipefail
replay=$1
source "$(dirname "$0")/replay_testlib.sh"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
AZ='TIMESTAMP,ContextTokens,GeneratedTokens'
ROW='2023-11-16 18:15:46.6805900,374,44'
MC='{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}'

# case NAME CONTENT WANT: WANT is a fixed string the error must contain.
case_() {
	local name=$1 file=$tmp/$1 want=$3
	printf '%b' "$2" >"$file"
	"$replay" --trace "$file" --no-progress --no-naive >"$tmp/$name.out" 2>"$tmp/$name.err"
	local rc=$?
	[ $rc -lt 128 ] || fail "$name: killed by signal $((rc - 128))"
	[ $rc -eq 2 ] || { cat "$tmp/$name.err"; fail "$name: exit status $rc, expected 2"; }
	grep -qF -- "$file$want" "$tmp/$name.err" || {
		cat "$tmp/$name.err"
		fail "$name: message does not contain '$file$want'"
	}
	echo "ok $name: $(head -1 "$tmp/$name.err")"
}

case_ azure_truncated "$AZ\n$ROW\n2023-11-16 18:15:50.99" ":3: expected 3 comma-separated fields"
case_ azure_negative "$AZ\n$ROW\n2023-11-16 18:15:50.99,-12,5\n" ":3: ContextTokens: negative token count '-12'"
case_ azure_non_numeric "$AZ\n2023-11-16 18:15:50.99,12,many\n" ":2: GeneratedTokens: not a whole number: 'many'"
case_ azure_bad_time "$AZ\nnoon,12,5\n" ":2: TIMESTAMP: expected"
case_ mooncake_truncated "$MC\n{\"timestamp\": 3000, \"input_length\": 12" ":2: truncated JSON"
case_ mooncake_negative "$MC\n$MC\n{\"timestamp\": 1, \"input_length\": 5, \"output_length\": -7}\n" \
	":3: output_length: negative token count -7"
case_ mooncake_non_numeric "{\"timestamp\": 1, \"input_length\": \"lots\", \"output_length\": 7}\n" \
	":1: input_length: expected a number, got a string: \"lots\""
case_ mooncake_missing "{\"timestamp\": 1, \"output_length\": 7}\n" ":1: missing key \"input_length\""
case_ vidur_non_numeric "num_prefill_tokens,num_decode_tokens\n12,x\n" ":2: num_decode_tokens: not a whole number"
case_ empty "" ": empty file: no requests"
case_ header_only "$AZ\n" ": no requests (only a header)"
case_ garbage "\x00\x01\x02 binary\n" ":1: "

# A missing file is a clear error too.
"$replay" --trace "$tmp/does-not-exist.csv" --no-progress >/dev/null 2>"$tmp/missing.err"
[ $? -eq 2 ] && grep -q "does-not-exist.csv: cannot open" "$tmp/missing.err" || fail "missing file"
echo "ok missing file"

# Skip mode: bad rows reported with their line numbers, good rows replayed.
printf '%b' "$AZ\n$ROW\n2023-11-16 18:15:47,x,1\n2023-11-16 18:15:48,10,-1\n2023-11-16 18:15:49,20,3\n" >"$tmp/mixed.csv"
"$replay" --trace "$tmp/mixed.csv" --on-error skip --no-progress --json "$tmp/mixed.json" \
	>"$tmp/mixed.out" 2>"$tmp/mixed.err" || { cat "$tmp/mixed.err"; fail "skip mode exit $?"; }
grep -qF "mixed.csv:3: ContextTokens: not a whole number: 'x' (row skipped)" "$tmp/mixed.err" || fail "skip: line 3 not reported"
grep -qF "mixed.csv:4: GeneratedTokens: negative token count '-1' (row skipped)" "$tmp/mixed.err" || fail "skip: line 4 not reported"
grep -qF "2 malformed rows skipped" "$tmp/mixed.err" || fail "skip: count not reported"
expect_eq "skip mode requests completed" "$(json_get "$tmp/mixed.json" 'j["kvpool"]["requests_completed"]')" 2
# Stop mode (the default) on the same file stops at line 3.
"$replay" --trace "$tmp/mixed.csv" --no-progress >/dev/null 2>"$tmp/stop.err"
[ $? -eq 2 ] && grep -qF "mixed.csv:3: ContextTokens" "$tmp/stop.err" || fail "stop mode"
echo "ok stop mode stops at line 3"

# --json never costs a file: the input named as --json is refused (and left
# whole), and a run that fails on its trace leaves an earlier results file
# as it was and makes no new one.
cp "$tmp/mixed.csv" "$tmp/victim.csv"
"$replay" --trace "$tmp/victim.csv" --json "$tmp/./victim.csv" --no-progress >/dev/null 2>"$tmp/victim.err"
[ $? -eq 2 ] && grep -qF "is the input file" "$tmp/victim.err" || { cat "$tmp/victim.err"; fail "--json = --trace not refused"; }
cmp -s "$tmp/mixed.csv" "$tmp/victim.csv" || fail "--json = --trace changed the trace"
echo '{"earlier": 1}' >"$tmp/earlier.json"
"$replay" --trace "$tmp/empty" --json "$tmp/earlier.json" --no-progress >/dev/null 2>&1
[ $? -eq 2 ] && [ "$(cat "$tmp/earlier.json")" = '{"earlier": 1}' ] || fail "a failed run changed an earlier --json file"
"$replay" --trace "$tmp/empty" --json "$tmp/new.json" --no-progress >/dev/null 2>&1
[ $? -eq 2 ] && [ ! -e "$tmp/new.json" ] || fail "a failed run left a --json file behind"
echo "ok --json: the input refused, files kept on a failed run"

# A request larger than the whole pool is rejected before anything is sized
# or hashed for it: a 2^30-token row with 140,000 hash ids (72 million keys
# at block size 1, 1.1 GB of them, and 8 GB of refs per worker, before)
# costs next to no memory, and the rest of the trace runs.
{
	printf '{"timestamp": 0, "input_length": 1073741823, "output_length": 1, "hash_ids": ['
	seq -s, 0 139999 | tr -d '\n'
	printf ']}\n'
	echo "$MC"
} >"$tmp/huge.jsonl"
rss_kb=$(python3 - "$replay" "$tmp/huge.jsonl" "$tmp/huge.out" "$tmp/huge.err" <<'PY'
import resource, subprocess, sys
replay, trace, out, err = sys.argv[1:]
with open(out, "w") as o, open(err, "w") as e:
    rc = subprocess.run([replay, "--trace", trace, "--prefix-cache", "--block-size", "1",
                         "--threads", "4", "--speed", "0", "--no-progress", "--no-naive"],
                        stdout=o, stderr=e, timeout=600).returncode
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
)
read -r rc rss_kb <<<"$rss_kb"
[ "$rc" = 0 ] || { cat "$tmp/huge.err" "$tmp/huge.out"; fail "huge row: exit $rc"; }
grep -q "rejected" "$tmp/huge.err" || { cat "$tmp/huge.err"; fail "huge row: not rejected"; }
grep -q "0 failed" "$tmp/huge.out" || { cat "$tmp/huge.out"; fail "huge row: checks"; }
[ "$rss_kb" -lt 800000 ] || fail "huge row: peak RSS $rss_kb kB (keys or refs made for a rejected row?)"
echo "ok a row larger than the pool: rejected, nothing sized for it (peak RSS $rss_kb kB)"

# Bad flags are usage errors, not crashes.
"$replay" --speed fast >/dev/null 2>&1
[ $? -eq 2 ] || fail "bad --speed not exit 2"
echo PASS
