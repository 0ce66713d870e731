#!/usr/bin/env bash
# tests/replay_prometheus_test.sh - a real Prometheus server scrapes
# kvpool_replay's /metrics.
#
#   replay_prometheus_test.sh KVPOOL_REPLAY [DASHBOARD_JSON ALERTS_YML [LIBKVPOOL_SO]]
#
# Starts the replay with --metrics-port 0 (the kernel picks a free port; the
# replay prints it) and --linger, checks the exposition with
# `promtool check metrics`, starts /usr/bin/prometheus on another free
# loopback port scraping it every second, then asks Prometheus's HTTP API
# for kvpool_allocations_total until it reports a value > 0.  With
# LIBKVPOOL_SO, a Python server (docs/examples/prometheus_server.py: two pools,
# "target" and "draft", the second with the prefix cache, in one
# kvpool.to_prometheus exposition) is a second target of the same job.
# With the dashboard and the alert rules given: Prometheus loads the rules
# (each must evaluate with health "ok"), and once the replay has finished,
# every PromQL expression of the dashboard ($__rate_interval = 1m, $job =
# kvpool, $pool = each pool: "replay", and "target" and "draft" of the Python
# server) must return at least one finite sample for each pool; only the
# prefix-cache panel may be empty, and only for a pool asked nothing by key.
# Everything it starts is killed on exit; every wait is bounded.
set -uo pipefail
replay=$1
dashboard=${2:-}
alerts=${3:-}
libkvpool=${4:-}
source "$(dirname "$0")/replay_testlib.sh"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
command -v prometheus >/dev/null || fail "prometheus not installed (Debian package prometheus)"
command -v promtool >/dev/null || fail "promtool not installed (Debian package prometheus)"
command -v curl >/dev/null || fail "curl not installed"

trap kill_pids EXIT

# The Python server first (its start takes a few seconds), so that the replay's
# run falls inside Prometheus's scrapes.
pytarget=
if [ -n "$libkvpool" ]; then
	R="$TEST_SRCDIR/$TEST_WORKSPACE"
	KVPOOL_LIBRARY="$libkvpool" PYTHONPATH="$R/python" /usr/bin/python3 \
		"$R/docs/examples/prometheus_server.py" --seconds 240 2>"$tmp/pyserver.err" &
	pids+=($!)
	pyport=$(metrics_port "$tmp/pyserver.err")
	[ -n "$pyport" ] || { cat "$tmp/pyserver.err"; fail "the Python server did not start"; }
	sleep 1
	curl -sf "http://127.0.0.1:$pyport/metrics" >"$tmp/pymetrics.txt" || fail "GET Python /metrics"
	promtool check metrics <"$tmp/pymetrics.txt" || fail "promtool rejects the Python server's text"
	for m in 'kvpool_blocks_in_use{pool="target"}' 'kvpool_blocks_in_use{pool="draft"}' \
		'kvpool_stream_blocks_free{pool="draft",stream="kv"}' \
		'kvpool_config_info{pool="draft",block_size="16",n_blocks="512",max_blocks="unbounded",prefix_cache="true"}'; do
		grep -q "^$m " "$tmp/pymetrics.txt" || fail "$m missing from the Python server's text"
	done
	echo "ok the Python server serves two pools in one family set on port $pyport"
	pytarget=", '127.0.0.1:$pyport'"
fi

# A replay that runs about twenty seconds (so that Prometheus scrapes it while it
# allocates), then keeps serving for up to 120 s.
"$replay" --requests 3000 --speed 25 --threads 2 --no-naive --no-progress \
	--metrics-port 0 --linger 120 >"$tmp/replay.out" 2>"$tmp/replay.err" &
pids+=($!)
port=$(metrics_port "$tmp/replay.err")
[ -n "$port" ] || { cat "$tmp/replay.err"; fail "the replay did not print its metrics port"; }
echo "ok replay serves /metrics on port $port"

curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/metrics.txt" || fail "GET /metrics failed"
promtool check metrics <"$tmp/metrics.txt" || fail "promtool check metrics rejected the exposition"
for m in 'kvpool_allocations_total{pool="replay"}' kvpool_bufcache_hits_total \
	kvpool_replay_requests_completed_total 'kvpool_usage_ratio{pool="replay"}' \
	'kvpool_stream_blocks_in_use{pool="replay",stream="k"}' \
	'kvpool_stream_blocks_free{pool="replay",stream="v"}' \
	'kvpool_config_info{pool="replay",block_size="[0-9]*",n_blocks="[0-9]*",max_blocks="[a-z0-9]*",prefix_cache="false"}' \
	'kvpool_build_info{version="[0-9.]*"}' 'kvpool_allocate_duration_seconds_count{pool="replay"}' \
	kvpool_replay_allocate_duration_seconds_count; do
	grep -q "^$m " "$tmp/metrics.txt" || fail "$m missing from /metrics"
done
grep -q '^# TYPE kvpool_allocate_duration_seconds histogram$' "$tmp/metrics.txt" ||
	fail "kvpool_allocate_duration_seconds is not a histogram"
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
      - targets: ['127.0.0.1:$port'$pytarget]
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
	value=$(query 'kvpool_allocations_total{pool="replay"}')
	[ -n "$value" ] && python3 -c "import sys; sys.exit(0 if float('$value') > 0 else 1)" && break
	value=
	sleep 1
done
[ -n "$value" ] || {
	tail -20 "$tmp/prometheus.log"
	fail "Prometheus never reported kvpool_allocations_total > 0"
}
echo "ok Prometheus reports kvpool_allocations_total{pool=\"replay\"} = $value"
expect_eq "up{job=kvpool}" "$(query 'min(up{job="kvpool"})')" 1

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
	pools=replay
	[ -n "$libkvpool" ] && pools="replay target draft"
	python3 - "$dashboard" "$pport" $pools <<'PY' || fail "dashboard queries"
import json, math, sys, urllib.parse, urllib.request
dashboard, pport, pools = sys.argv[1], sys.argv[2], sys.argv[3:]
d = json.load(open(dashboard))
exprs = [(p["title"], t["expr"]) for p in d["panels"] for t in p["targets"]]

def query(q):
    url = f"http://127.0.0.1:{pport}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    return json.load(urllib.request.urlopen(url, timeout=5))

# The remote tier's families exist only with --remote-cache.
has_remote = bool(query('kvpool_remote_hits_total{job="kvpool"}')["data"]["result"])
bad = 0
for pool in pools:
    # The prefix families are always exported (0 with the cache off): the panel
    # has data only for a pool some key was asked of.
    r = query(f'kvpool_prefix_queries_total{{job="kvpool",pool="{pool}"}}')["data"]["result"]
    has_prefix = any(float(s["value"][1]) > 0 for s in r)
    for title, expr in exprs:
        if "$pool" not in expr and pool != pools[0]:
            continue  # build_info: one per process, no pool label
        q = (expr.replace("$__rate_interval", "1m").replace('=~"$job"', '=~"kvpool"')
             .replace('=~"$pool"', f'="{pool}"'))
        r = query(q)
        if r.get("status") != "success":
            print(f"FAIL {pool} {title}: {q}: {r}"); bad += 1; continue
        vals = [float(s["value"][1]) for s in r["data"]["result"]]
        finite = [v for v in vals if math.isfinite(v)]
        if "kvpool_remote_" in expr and not has_remote:
            print(f"skip {title}: no remote tier in this run ({len(vals)} samples)")
            continue
        if "prefix_" in expr and not has_prefix:
            print(f"skip {pool} {title}: no key asked of this pool ({len(vals)} samples)")
            continue
        ok = bool(finite)
        print(f"{'ok  ' if ok else 'FAIL'} {pool} {title}: {q} -> {finite[:4]}")
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
