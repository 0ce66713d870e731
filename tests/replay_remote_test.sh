#!/usr/bin/env bash
# tests/replay_remote_test.sh - kvpool_replay --remote-cache against a real
# redis-server this test starts on a free loopback port (and stops).
#
#   1. Two replay processes one after the other on the first Mooncake rows
#      with a small pool: the second finds the first's blocks in Redis (its
#      hit rate is higher, it has remote hits) and every check passes, the
#      check of every matched block's rows among them.
#   2. A two-thread replay while the server is killed (SIGKILL), started
#      again on the same port, then frozen (SIGSTOP) and thawed: the replay
#      completes with all its checks, saw errors and reconnected, its
#      longest fetch call stayed far below the freeze, and the new server
#      holds blocks written after the restart and answered fetches with
#      data after the thaw (its keyspace_hits grew).
set -euo pipefail
replay=$1
self=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source=tests/replay_testlib.sh
. "$(dirname "$self")/replay_testlib.sh"
trace="$(kvp_traces_dir)/conversation_trace.jsonl"
[ -f "$trace" ] || fail "no trace at $trace"
command -v redis-server >/dev/null || fail "redis-server not installed (tools/setup.sh)"
tmp=$(mktemp -d)
rpid=
cleanup() {
	local status=$?
	set +e
	if [ -n "$rpid" ]; then
		kill -CONT "$rpid" 2>/dev/null
		kill -9 "$rpid" 2>/dev/null
		wait "$rpid" 2>/dev/null
	fi
	kill_pids
	rm -rf "$tmp"
	exit "$status"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_redis() {
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning \
		>/dev/null &
	rpid=$!
	for _ in $(seq 500); do
		redis-cli -p "$port" PING >/dev/null 2>&1 && return
		sleep 0.01
	done
	fail "redis-server did not answer on port $port"
}
hits() { redis-cli -p "$port" INFO stats | sed -n 's/^keyspace_hits:\([0-9]*\).*/\1/p'; }
start_redis
url="redis://127.0.0.1:$port"
common=(--trace "$trace" --prefix-cache --storage --head-dim 8 --no-naive --no-progress
	--blocks 2048 --remote-cache "$url")

# 1. two processes, one after the other
"$replay" "${common[@]}" --limit 200 --threads 1 --json "$tmp/r1.json" >"$tmp/r1.txt" 2>&1 ||
	{ tail -20 "$tmp/r1.txt"; fail "run 1 failed its checks"; }
"$replay" "${common[@]}" --limit 200 --threads 1 --json "$tmp/r2.json" >"$tmp/r2.txt" 2>&1 ||
	{ tail -20 "$tmp/r2.txt"; fail "run 2 failed its checks"; }
r1=$(json_get "$tmp/r1.json" 'j["prefix"]["prefix_hit_rate"]')
r2=$(json_get "$tmp/r2.json" 'j["prefix"]["prefix_hit_rate"]')
h2=$(json_get "$tmp/r2.json" 'j["prefix"]["remote_hits"]')
rc2=$(json_get "$tmp/r2.json" 'j["prefix"]["row_checks"]')
echo "run 1 prefix_hit_rate $r1, run 2 $r2 (remote hits $h2, $rc2 blocks' rows checked)"
python3 -c "import sys; sys.exit(0 if $r2 > $r1 and $h2 > 0 and $rc2 > 0 else 1)" ||
	fail "run 2 did not use what run 1 left in Redis"
expect_eq "run 2 row checks failed" "$(json_get "$tmp/r2.json" 'j["prefix"]["row_checks_failed"]')" 0

# 2. faults in the middle of a two-thread run
redis-cli -p "$port" FLUSHALL >/dev/null
# Paced (arrivals at 10x the trace's times, 400 requests over 13 s): the run
# outlasts the 5.5 s of faults however fast the machine is.
"$replay" "${common[@]}" --limit 400 --speed 10 --step-ms 0 --threads 2 \
	--json "$tmp/f.json" >"$tmp/f.txt" 2>&1 &
replay_pid=$!
pids+=("$replay_pid")
sleep 1.5
kill -0 "$replay_pid" 2>/dev/null || fail "the replay ended before the faults (too short a run)"
kill -9 "$rpid"
wait "$rpid" 2>/dev/null || true
rpid=
sleep 0.5
start_redis
echo "ok server killed and started again"
sleep 2
kill -STOP "$rpid"
sleep 1.5
kill -CONT "$rpid"
after_restart=$(hits)
echo "ok server frozen 1.5 s and thawed (its keyspace_hits so far: $after_restart)"
kill -0 "$replay_pid" 2>/dev/null || fail "the replay ended during the faults (too short a run)"
status=0
wait "$replay_pid" || status=$?
pids=()
[ "$status" = 0 ] || { tail -30 "$tmp/f.txt"; fail "the replay failed its checks (status $status)"; }
grep -q '^10 checks, 0 failed' "$tmp/f.txt" || fail "the replay did not pass every check"
after_thaw=$(hits)
errs=$(json_get "$tmp/f.json" 'j["prefix"]["remote_errors"]')
recon=$(json_get "$tmp/f.json" 'j["prefix"]["remote_reconnects"]')
maxms=$(json_get "$tmp/f.json" 'j["prefix"]["remote_fetch_max_ms"]')
echo "replay: remote errors $errs, reconnects $recon, longest fetch call $maxms ms;" \
	"new server's keyspace_hits $after_restart at the thaw, $after_thaw at the end"
python3 -c "import sys; sys.exit(0 if $errs > 0 and $recon > 0 else 1)" ||
	fail "the faults were not seen"
python3 -c "import sys; sys.exit(0 if $maxms < 1000 else 1)" ||
	fail "a fetch call took $maxms ms: it waited out the freeze"
keys=$(redis-cli -p "$port" DBSIZE)
[ "$keys" -gt 0 ] || fail "the tier wrote nothing to the restarted server"
[ "$after_thaw" -gt "$after_restart" ] || fail "the tier did not use the server after the thaw"
expect_eq "fault run row checks failed" "$(json_get "$tmp/f.json" 'j["prefix"]["row_checks_failed"]')" 0
echo PASS
