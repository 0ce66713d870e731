#!/usr/bin/env bash
# tests/metrics_slow_test.sh STRESS [N] - /metrics keeps answering while N
# (default 1,200) slow local clients hold (or wait for) connections, each
# sending one byte of an incomplete request every 4 s.  Before the fix every
# scrape failed while they lasted (select() mode cannot take a socket past
# FD_SETSIZE, no connection limit, 10 s inactivity timeout): all 3 of 3.
# Two rounds.  Slow clients on 127.0.0.2 (another address): the per-IP
# limit leaves room, and every scrape must succeed at its first attempt.
# Slow clients on 127.0.0.1, the scraper's own address: while they hold
# their per-IP share a new connection from that address is refused, so a
# single attempt may fail; the 1-s timeout frees their connections, and
# each scrape must succeed within 10 s of retrying every 0.2 s (before the
# fix none did while the slow clients lasted).
set -uo pipefail
stress=$1
nslow=${2:-1200}
source "$(dirname "$0")/replay_testlib.sh"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
command -v curl >/dev/null || fail "curl not installed"
trap kill_pids EXIT

"$stress" --threads 1 --seconds 120 --no-progress --no-faults --metrics-port 0 \
	>"$tmp/stress.out" 2>"$tmp/stress.err" &
server=$!
pids+=("$server")
port=$(metrics_port "$tmp/stress.err")
[ -n "$port" ] || { cat "$tmp/stress.err"; fail "no metrics port printed"; }

# slow.py ADDR PORT N: N connections from ADDR to the server, one byte of a
# request every 4 s each, reconnecting when the server closes one; runs
# until killed.  Prints "holding N" once all have connected (or tried).
cat >"$tmp/slow.py" <<'PY'
import errno, resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
addr, port = sys.argv[1], int(sys.argv[2])
req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
socks = []
def connect():
    s = socket.socket()
    s.bind((addr, 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    return [s, 0]
for _ in range(int(sys.argv[3])):
    socks.append(connect())
print("holding", len(socks), flush=True)
while True:
    for c in socks:
        try:
            c[0].send(req[c[1] % len(req):c[1] % len(req) + 1])
            c[1] += 1
        except OSError:
            c[0].close()
            c[:] = connect()
    time.sleep(4)
PY

scrape_once() {
	curl -sS -f --max-time 10 "http://127.0.0.1:$port/metrics" >"$tmp/m.txt" &&
		grep -q '^kvpool_allocations_total{pool="stress"} ' "$tmp/m.txt"
}

# scrape_round ADDR TRIES: 3 scrapes with N slow clients on ADDR; each may
# take up to TRIES attempts 0.2 s apart.
scrape_round() {
	local addr=$1 tries=$2
	python3 "$tmp/slow.py" "$addr" "$port" "$nslow" >"$tmp/slow-$addr.out" 2>&1 &
	local spid=$!
	pids+=("$spid")
	for _ in $(seq 100); do
		grep -q holding "$tmp/slow-$addr.out" && break
		sleep 0.1
	done
	grep -q holding "$tmp/slow-$addr.out" || { cat "$tmp/slow-$addr.out"; fail "slow clients did not start"; }
	sleep 1
	local ok=0
	for i in 1 2 3; do
		local t0=$SECONDS n=0 done=0
		while [ $n -lt "$tries" ]; do
			n=$((n + 1))
			if scrape_once 2>/dev/null; then
				done=1
				break
			fi
			sleep 0.2
		done
		if [ $done = 1 ]; then
			ok=$((ok + 1))
			echo "ok scrape $i with $nslow slow clients on $addr: attempt $n, $((SECONDS - t0)) s"
		else
			echo "scrape $i with $nslow slow clients on $addr FAILED ($n attempts)"
		fi
		sleep 1
	done
	kill $spid
	wait $spid 2>/dev/null
	kill -0 $server 2>/dev/null || { tail -20 "$tmp/stress.err"; fail "the server died"; }
	[ $ok -eq 3 ] || fail "$((3 - ok)) of 3 scrapes failed with slow clients on $addr"
}
scrape_round 127.0.0.2 1
scrape_round 127.0.0.1 50
echo PASS
