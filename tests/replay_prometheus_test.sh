#!/usr/bin/env bash
# tests/replay_prometheus_test.sh - a real Prometheus server scrapes
# kvpool_replay's /metrics.
#
#   replay_prometheus_test.sh KVPOOL_REPLAY [DASHBOARD_JSON ALERTS_YML]
#
# Starts the replay with --metrics-port 0 (the kernel picks a free port; the
# replay prints it) and --linger, checks the exposition with
# `promtool check metrics`, starts /usr/bin/prometheus on another free
# loopback port scraping it every second, then asks Prometheus's HTTP API
# for kvpool_block_pool_allocations_total until it reports a value > 0.
# With the dashboard and the alert rules given: Prometheus loads the rules
# (each must evaluate with health "ok"), and once the replay has finished,
# every PromQL expression of the dashboard ($__rate_interval = 1m, $job =
# kvpool) must return at least one finite sample; only the prefix-cache
# panel may be empty, and only when the replay asked the prefix cache nothing.
# Everything it starts is killed on exit; every wait is bounded.
set -uo pipefail
replay=$1
dashboard=${2:-}
alerts=${3:-}
source "$(dirname "$0")/replay_testlib.sh"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
command -v prometheus >/dev/null || fail "prometheus not installed (Debian package prometheus)"
command -v promtool >/dev/null || fail "promtool not installed (Debian package prometheus)"
command -v curl >/dev/null || fail "curl not installed"

trap kill_pids EXIT

# A replay that runs about ten seconds (so that Prometheus scrapes it while it
# allocates), then keeps serving for up to 120 s.
"$replay" --requests 3000 --speed 50 --threads 2 --no-naive --no-progress \
	--metrics-port 0 --linger 120 >"$tmp/replay.out" 2>"$tmp/replay.err" &
pids+=($!)
port=$(metrics_port "$tmp/replay.err")
[ -n "$port" ] || { cat "$tmp/replay.err"; fail "the replay did not print its metrics port"; }
echo "ok replay serves /metrics on port $port"

curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/metrics.txt" || fail "GET /metrics failed"
promtool check metrics <"$tmp/metrics.txt" || fail "promtool check metrics rejected the exposition"
for m in kvpool_block_pool_allocations_total kvpool_bufcache_hits_total \
	kvpool_replay_requests_completed_total kvpool_block_pool_usage_ratio \
	'kvpool_block_pool_stream_blocks_in_use{stream="k"}' 'kvpool_block_pool_stream_blocks_free{stream="v"}' \
	'kvpool_block_pool_build_info{version="[0-9.]*"}' kvpool_block_pool_allocate_duration_seconds_count; do
	grep -q "^$m " "$tmp/metrics.txt" || fail "$m missing from /metrics"
done
grep -q '^# TYPE kvpool_block_pool_allocate_duration_seconds histogram$' "$tmp/metrics.txt" ||
	fail "allocate_duration_seconds is not a histogram"
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
if [ -n "$alerts" ]; then
	cp "$alerts" "$tmp/alerts.yml"
	printf 'rule_files: [alerts.yml]\n' >>"$tmp/prometheus.yml"
fi
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

if [ -n "$dashboard" ]; then
	# Wait for the run to end: the 1m windows then span the whole run.
	running=
	for _ in $(seq 90); do
		running=$(query 'kvpool_replay_running')
		[ "$running" = 0 ] && break
		sleep 1
	done
	[ "$running" = 0 ] || fail "Prometheus never saw the replay finish (kvpool_replay_running=$running)"
	sleep 2
	python3 - "$dashboard" "$pport" "$tmp/metrics.txt" <<'PY' || fail "dashboard queries"
import json, math, sys, urllib.parse, urllib.request
dashboard, pport, metrics = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()
d = json.load(open(dashboard))
exprs = [(p["title"], t["expr"]) for p in d["panels"] for t in p["targets"]]
# The prefix families are always exported (0 with the cache off): the panel
# has data only when some key was asked for.
has_prefix = any(l.split()[-1] not in ("0", "0.0") for l in metrics.splitlines()
                 if l.startswith("kvpool_block_pool_prefix_queries_total"))
# The remote tier's families exist only with --remote-cache.
has_remote = "kvpool_remote_hits_total" in metrics
bad = 0
for title, expr in exprs:
    q = expr.replace("$__rate_interval", "1m").replace('=~"$job"', '=~"kvpool"')
    url = f"http://127.0.0.1:{pport}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    r = json.load(urllib.request.urlopen(url, timeout=5))
    if r.get("status") != "success":
        print(f"FAIL {title}: {q}: {r}"); bad += 1; continue
    vals = [float(s["value"][1]) for s in r["data"]["result"]]
    finite = [v for v in vals if math.isfinite(v)]
    if "kvpool_remote_" in expr and not has_remote:
        print(f"skip {title}: no remote tier in this run ({len(vals)} samples)")
        continue
    if "prefix_" in expr and not has_prefix:
        print(f"skip {title}: no prefix-cache families in this run ({len(vals)} samples)")
        continue
    ok = bool(finite)
    print(f"{'ok  ' if ok else 'FAIL'} {title}: {q} -> {finite[:4]}")
    bad += not ok
sys.exit(1 if bad else 0)
PY
	echo "ok every dashboard query returns data from the replay"
fi
if [ -n "$alerts" ]; then
	curl -sf --max-time 5 "http://127.0.0.1:$pport/api/v1/rules" | python3 -c '
import json, sys
rules = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
names = sorted(r["name"] for r in rules)
bad = [r["name"] + ": " + r.get("lastError", "") for r in rules if r.get("health") != "ok"]
print("rules:", names, "unhealthy:", bad)
sys.exit(1 if len(rules) < 3 or bad else 0)' || fail "the alert rules do not evaluate in Prometheus"
	echo "ok Prometheus evaluates the alert rules"
fi
echo PASS
