#!/usr/bin/python3
"""bench/plot.py - draw the benchmark suite's JSON output as PNG charts.

    bazel run //bench:all -- --quick --json /tmp/bench.json
    /usr/bin/python3 bench/plot.py /tmp/bench.json            # -> docs/img/*.png

Charts (every point is a median the suite printed; nothing is computed here
except the axes):
    getput_threads.png   block get/put throughput vs threads, one line per peer
    batch.png            blocks/s vs blocks per call (1 thread, 8 threads)
    scaling_size.png     throughput and metadata bytes/block vs pool size
    growth.png           pool size reached vs time while growing under load

Uses Debian's python3-matplotlib (Agg backend, no display needed).
"""
import argparse
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, os.pardir, "docs", "img")


def figures(data, bench, metric):
    """{series: {x: value}} for one benchmark and metric."""
    out = {}
    for f in data["figures"]:
        if f["bench"] == bench and f["metric"] == metric and f["value"] is not None:
            out.setdefault(f["series"], {})[f["x"]] = f["value"]
    return out


def xnum(x, key):
    m = re.search(key + r"=(\d+)", x)
    return int(m.group(1)) if m else None


def subtitle(data):
    m = data["meta"]
    mode = "quick" if m.get("quick") else ("smoke" if m.get("smoke") else "full")
    return "%s, %d CPUs, commit %s, %s run, median of %d" % (
        m.get("cpu", "?"), m.get("nproc", 0), m.get("commit") or "?", mode, m.get("reps", 0))


def plot_getput(data, out):
    s = figures(data, "getput", "ops_per_s")
    if not s:
        return None
    fig, ax = plt.subplots(figsize=(9.5, 5))
    styles = {"kvpool_full": "o-", "kvpool_raw": "s-", "limit_tls_array": "k:"}
    for name in sorted(s):
        pts = sorted((xnum(x, "threads"), v) for x, v in s[name].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(name, ".--"),
                label=name, linewidth=2 if name.startswith("kvpool") else 1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 4, 8, 16])
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("threads (2 cores: 4-16 are oversubscribed)")
    ax.set_ylabel("get+put pairs per second (aggregate)")
    ax.set_title("Block get/put, one block per op\n" + subtitle(data), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    path = os.path.join(out, "getput_threads.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_batch(data, out):
    s = figures(data, "batch", "blocks_per_s")
    if not s:
        return None
    threads = sorted({xnum(x, "threads") for v in s.values() for x in v})
    fig, axes = plt.subplots(1, len(threads), figsize=(5 * len(threads), 4.5), squeeze=False)
    for ax, t in zip(axes[0], threads):
        for name in sorted(s):
            pts = sorted((xnum(x, "k"), v) for x, v in s[name].items()
                         if xnum(x, "threads") == t)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks([1, 16, 256])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("blocks per call")
        ax.set_ylabel("blocks per second")
        ax.set_title("%d thread%s" % (t, "s" if t > 1 else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Batch allocate + free\n" + subtitle(data), fontsize=9)
    path = os.path.join(out, "batch.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_scaling(data, out):
    s = figures(data, "scaling", "ops_per_s")
    heap = figures(data, "scaling", "heap_bytes_per_block")
    rss = figures(data, "scaling", "rss_bytes_per_block")
    if not s:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name in sorted(s):
        pts = sorted((xnum(x, "blocks"), v) for x, v in s[name].items() if xnum(x, "blocks"))
        a1.plot([p[0] for p in pts], [p[1] for p in pts],
                "o-" if name.startswith("kvpool") else "x--", label=name)
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlabel("blocks in pool")
    a1.set_ylabel("ops per second (1 thread)")
    a1.set_title("throughput vs pool size")
    a1.grid(True, which="both", alpha=0.3)
    a1.legend(fontsize=7)
    for label, src, style in (("heap (mallinfo2)", heap, "o-"), ("RSS after touching all", rss, "s--")):
        for name in sorted(src):
            pts = sorted((xnum(x, "blocks"), v) for x, v in src[name].items())
            a2.plot([p[0] for p in pts], [p[1] for p in pts], style, label="%s, %s" % (name, label))
    a2.axhline(32, color="red", linewidth=1, linestyle=":", label="target: 32 B")
    a2.set_xscale("log")
    a2.set_xlabel("blocks in pool")
    a2.set_ylabel("metadata bytes per block")
    a2.set_title("metadata per block")
    a2.grid(True, which="both", alpha=0.3)
    a2.legend(fontsize=7)
    fig.suptitle("Scaling with pool size\n" + subtitle(data), fontsize=9)
    path = os.path.join(out, "scaling_size.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_growth(data, out):
    s = figures(data, "scaling", "reached_at_ms").get("growing_from_1024")
    if not s:
        return None
    pts = sorted((xnum(x, "blocks"), v) for x, v in s.items())
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p[1] for p in pts], [p[0] for p in pts], "o-")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("ms since start (2 threads allocating, no frees)")
    ax.set_ylabel("blocks in pool")
    ax.set_title("Growth under load: each doubling\n" + subtitle(data), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    path = os.path.join(out, "growth.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="the file bench/suite/main.c wrote with --json")
    ap.add_argument("--out", default=DEFAULT_OUT, help="directory for the PNGs (docs/img)")
    args = ap.parse_args(argv)
    with open(args.json) as f:
        data = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    made = [p for p in (plot_getput(data, args.out), plot_batch(data, args.out),
                        plot_scaling(data, args.out), plot_growth(data, args.out)) if p]
    for p in made:
        print(os.path.normpath(p))
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
