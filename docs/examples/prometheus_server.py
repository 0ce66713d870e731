"""docs/examples/prometheus_server.py - a Python server's pools on /metrics.

    python3 docs/examples/prometheus_server.py [--port P] [--seconds S]

Two pools, as a serving process might keep them (the target model's and a
draft model's, the draft one with the prefix cache), worked by one thread
each; GET /metrics answers kvpool.to_prometheus() of both: one set of
kvpool_* families, the pools told apart by pool="target" and pool="draft".
Prints "metrics: http://127.0.0.1:PORT/metrics" on stderr once it listens
(port 0, the default, lets the kernel pick).  Runs for --seconds (default
60), then exits.  Standard library and kvpool only.
"""

import argparse
import http.server
import random
import sys
import threading
import time

import kvpool


def work(pool, stop, prefix):
    """Requests of 1-40 blocks, held a moment, then freed; with the prefix
    cache, each request publishes its first block and looks for an earlier one."""
    rng = random.Random(1)
    owner = 0
    while not stop.is_set():
        owner += 1
        n = rng.randint(1, 40) * 16
        try:
            blocks = pool.allocate(stream="k", n_tokens=n, owner=owner)
        except kvpool.BlockPoolExhaustedError:
            time.sleep(0.001)
            continue
        if prefix:
            key = kvpool.prefix_hash(None, list(range(16)), salt=owner % 8)
            try:
                pool.publish(blocks[0], key)
            except kvpool.PrefixKeyExistsError:
                pass
            pool.match_prefix("k", [kvpool.prefix_hash(None, list(range(16)),
                                                       salt=(owner + 1) % 8)], owner)
        time.sleep(rng.random() * 0.002)
        if prefix:
            pool.free_owned(owner, pool.blocks_for(owner))
        else:
            pool.free_all(owner)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=60.0)
    a = ap.parse_args()
    pools = {
        "target": kvpool.BlockPoolAllocator(kvpool.PoolConfig(block_size=16, n_blocks=2048)),
        "draft": kvpool.BlockPoolAllocator(
            kvpool.PoolConfig(block_size=16, n_blocks=512, separate_kv=False,
                              prefix_cache=True)),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404, "kvpool: metrics are at /metrics")
                return
            body = kvpool.to_prometheus(pools).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    stop = threading.Event()
    workers = [threading.Thread(target=work, args=(p, stop, name == "draft"), daemon=True)
               for name, p in pools.items()]
    for t in workers:
        t.start()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print(f"metrics: http://127.0.0.1:{srv.server_address[1]}/metrics", file=sys.stderr,
          flush=True)
    time.sleep(a.seconds)
    stop.set()
    for t in workers:
        t.join()
    srv.shutdown()


if __name__ == "__main__":
    main()
