#!/usr/bin/env bash
# tests/monitoring_test.sh - the shipped alert rules and dashboard are valid.
#
#   monitoring_test.sh ALERTS_YML DASHBOARD_JSON
#
#   1. promtool check rules accepts docs/prometheus/kvpool-alerts.yml;
#   2. promtool test rules: each alert fires on a series that should fire it
#      (exhaustion, usage above 0.9 for 5 m, stale frees rising for 10 m) and
#      stays silent on one that should not;
#   3. the dashboard is JSON with a PromQL expression in every panel.
# tests/replay_prometheus_test.sh evaluates the dashboard's expressions
# against a real Prometheus scraping the replay.
set -euo pipefail
rules=$1 dashboard=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
command -v promtool >/dev/null || fail "promtool not installed (Debian package prometheus)"

promtool check rules "$rules" || fail "promtool check rules rejected $rules"

cp "$rules" "$tmp/alerts.yml"
cat >"$tmp/alerts_test.yml" <<'YML'
rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'kvpool_exhausted_total{instance="busy",pool="main"}'
        values: '0 0 0 5 10 15 20'
      - series: 'kvpool_exhausted_total{instance="calm",pool="main"}'
        values: '0x6'
      - series: 'kvpool_usage_ratio{instance="busy",pool="main"}'
        values: '0.95x10'
      - series: 'kvpool_usage_ratio{instance="calm",pool="main"}'
        values: '0.95 0.95 0.5 0.95 0.95 0.95 0.95 0.95 0.5 0.5 0.5'
      - series: 'kvpool_stale_frees_total{instance="busy",pool="main"}'
        values: '0+3x30'
      - series: 'kvpool_stale_frees_total{instance="calm",pool="main"}'
        values: '7x30'
    alert_rule_test:
      - eval_time: 6m
        alertname: KvpoolExhausted
        exp_alerts:
          - exp_labels: {severity: warning, instance: busy, pool: main}
            exp_annotations:
              summary: "kvpool pool main on busy refuses allocations"
              description: "66.67m allocate calls/s failed with KVP_EEXHAUSTED over the last 5 minutes. Add blocks (n_blocks, grow_on_exhaustion/max_blocks) or admit fewer requests."
      - eval_time: 2m
        alertname: KvpoolExhausted
        exp_alerts: []
      - eval_time: 6m
        alertname: KvpoolUsageHigh
        exp_alerts:
          - exp_labels: {severity: warning, instance: busy, pool: main}
            exp_annotations:
              summary: "kvpool pool main on busy is over 90% used"
              description: "95% of the managed blocks have been in use for 5 minutes; exhaustion is near."
      - eval_time: 4m
        alertname: KvpoolUsageHigh
        exp_alerts: []
      - eval_time: 25m
        alertname: KvpoolStaleFreesRising
        exp_alerts:
          - exp_labels: {severity: info, instance: busy, pool: main}
            exp_annotations:
              summary: "kvpool pool main on busy keeps receiving stale frees"
              description: "50m frees/s skipped as stale (double free or a ref older than its block's generation) for 10 minutes: a caller frees blocks it no longer owns."
      - eval_time: 8m
        alertname: KvpoolStaleFreesRising
        exp_alerts: []
YML
(cd "$tmp" && promtool test rules alerts_test.yml) || fail "promtool test rules"

python3 - "$dashboard" <<'PY' || fail "dashboard"
import json, sys
d = json.load(open(sys.argv[1]))
panels = d["panels"]
assert len(panels) >= 8, len(panels)
exprs = [t["expr"] for p in panels for t in p["targets"]]
assert all(p["targets"] for p in panels), "a panel without a query"
for want in ("usage_ratio", "allocations_total", "frees_total", "exhausted_total",
             "fragmentation", "allocate_duration_seconds_bucket", "prefix_hits_total",
             "stream_blocks_in_use", "build_info", "config_info", "kvpool_remote_hits_total",
             "kvpool_remote_fetch_seconds_bucket", "kvpool_remote_writes_dropped_total"):
    assert any(want in e for e in exprs), want
# One set of family names: every query reads kvpool_* families, none the old per-prefix ones,
# and every pool query can be narrowed to a pool.
assert not any("kvpool_block_pool_" in e for e in exprs), "an old kvpool_block_pool_* name"
# (The remote tier's families belong to a tier, not a pool: no pool label.)
assert all('pool=~"$pool"' in e for e in exprs
           if "build_info" not in e and "kvpool_remote_" not in e), "no pool selector"
print(f"ok dashboard: {len(panels)} panels, {len(exprs)} queries")
PY
echo PASS
