#!/usr/bin/env bash
# tests/replay_prometheus_test.sh - a real Prometheus server scrapes
# kvpool_replay's /metrics.
#
# Starts the replay with --metrics-port 0 (the kernel picks a free port; the
# replay prints it) and --linger, checks the exposition with
# `promtool check metrics`, starts /usr/bin/prometheus on another free
# loopback port scraping it every second, then asks Prometheus's HTTP API
# for kvpool_block_pool_allocations_total until it reports a value > 0.
# Everything it starts is killed on exit; every wait is bounded.
set -uo pipefail
replay=$1
source "$(dirname "$0")/replay_testlib.sh"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
command -v prometheus >/dev/null || fail "prometheus not installed (Debian package prometheus)"
command -v promtool >/dev/null || fail "promtool not installed (Debian package prometheus)"
command -v curl >/dev/null || fail "curl not installed"

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT

# A replay that runs a few seconds, then keeps serving for up to 120 s.
"$replay" --requests 3000 --speed 2000 --threads 2 --no-naive --no-progress \
	--metrics-port 0 --linger 120 >"$tmp/replay.out" 2>"$tmp/replay.err" &
pids+=($!)
port=
for _ in $(seq 100); do
	port=$(sed -n 2>/dev/null 's|^metrics: http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$tmp/replay.err")
	[ -n "$port" ] && break
	sleep 0.1
done
[ -n "$port" ] || { cat "$tmp/replay.err"; fail "the replay did not print its metrics port"; }
echo "ok replay serves /metrics on port $port"

curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/metrics.txt" || fail "GET /metrics failed"
promtool check metrics <"$tmp/metrics.txt" || fail "promtool check metrics rejected the exposition"
for m in kvpool_block_pool_allocations_total kvpool_bufcache_hits_total kvpool_replay_requests_completed_total; do
	grep -q "^$m " "$tmp/metrics.txt" || fail "$m missing from /metrics"
done
echo "ok exposition passes promtool and has pool, bufcache and replay families"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/nope")
expect_eq "unknown path status" "$code" 404

pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kvpool
    static_configs:
      - targets: ['127.0.0.1:$port']
YML
promtool check config "$tmp/prometheus.yml" >/dev/null || fail "prometheus.yml rejected"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
	--web.listen-address="127.0.0.1:$pport" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pids+=($!)

query() { # PROMQL -> first sample value, or nothing
	curl -sf --max-time 2 "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" |
		python3 -c 'import json,sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")' 2>/dev/null
}

value=
for _ in $(seq 60); do
	value=$(query kvpool_block_pool_allocations_total)
	[ -n "$value" ] && python3 -c "import sys; sys.exit(0 if float('$value') > 0 else 1)" && break
	value=
	sleep 1
done
[ -n "$value" ] || {
	tail -20 "$tmp/prometheus.log"
	fail "Prometheus never reported kvpool_block_pool_allocations_total > 0"
}
echo "ok Prometheus reports kvpool_block_pool_allocations_total = $value"
expect_eq "up{job=kvpool}" "$(query 'up{job="kvpool"}')" 1
echo PASS
