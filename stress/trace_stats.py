#!/usr/bin/env python3
"""trace_stats.py - statistics of the shared LLM serving traces.

Computes, for each trace in ../shared/traces (or the directory given), the
figures the built-in workload of kvpool_replay is fitted to:
  - request count, time span, mean arrival rate;
  - inter-arrival statistics (mean, coefficient of variation, share of
    requests arriving in the same instant as the previous one);
  - prompt and output length: mean, min, max and the quantile knots
    (QUANTILES below) that stress/workload.c samples from.

Usage: python3 stress/trace_stats.py [TRACE_DIR] [--c]
  --c  also print the quantile tables as C initialisers (for workload.c).

Pure standard library (Debian's python3), reads the files in place.
"""
import datetime
import json
import math
import os
import statistics
import sys

QUANTILES = [0.0, 0.005, 0.01, 0.025, 0.05, 0.075, 0.10, 0.15, 0.20, 0.25, 0.30,
             0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80, 0.85,
             0.90, 0.925, 0.95, 0.975, 0.99, 0.995, 0.999, 1.0]


def icdf_mean(knots):
    """Mean of the piecewise-linear inverse CDF through the knots (what workload.c samples)."""
    return sum((QUANTILES[i + 1] - QUANTILES[i]) * (knots[i] + knots[i + 1]) / 2
               for i in range(len(knots) - 1))


def quantile(sorted_vals, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    n = len(sorted_vals)
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * frac


def azure(path):
    rows = []
    with open(path) as f:
        next(f)
        for line in f:
            ts, ctx, gen = line.strip().split(",")
            # 7 fractional digits: Python's %f takes 6.
            day, frac = ts.split(".")
            t = datetime.datetime.strptime(day, "%Y-%m-%d %H:%M:%S")
            sec = t.timestamp() + int(frac) / 10 ** len(frac)
            rows.append((sec, int(ctx), int(gen)))
    return rows


def mooncake(path):
    rows = []
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            rows.append((o["timestamp"] / 1000.0, o["input_length"], o["output_length"]))
    return rows


def vidur(path):
    rows = []
    with open(path) as f:
        next(f)
        for line in f:
            p, d = line.split(",")[:2]
            rows.append((None, int(p), int(d)))
    return rows


def describe(name, rows, want_c):
    print("== %s" % name)
    print("requests            %d" % len(rows))
    times = [r[0] for r in rows if r[0] is not None]
    if times:
        t0 = times[0]
        span = times[-1] - t0
        gaps = [b - a for a, b in zip(times, times[1:])]
        mean_gap = statistics.fmean(gaps)
        cv = statistics.pstdev(gaps) / mean_gap if mean_gap > 0 else float("nan")
        same = sum(1 for g in gaps if g == 0) / len(gaps)
        print("span_s              %.3f" % span)
        print("rate_per_s          %.4f" % (len(rows) / span if span > 0 else float("nan")))
        print("interarrival_mean_s %.4f" % mean_gap)
        print("interarrival_cv     %.3f" % cv)
        print("same_instant_frac   %.3f" % same)
        if same > 0.5:
            # Batched arrivals: describe the batches.
            batches = []
            cur = 1
            for g in gaps:
                if g == 0:
                    cur += 1
                else:
                    batches.append(cur)
                    cur = 1
            batches.append(cur)
            bgaps = sorted(set(times))
            bg = [b - a for a, b in zip(bgaps, bgaps[1:])]
            print("batches             %d" % len(batches))
            print("batch_size_mean     %.3f" % statistics.fmean(batches))
            print("batch_size_sd       %.3f" % statistics.pstdev(batches))
            print("batch_size_max      %d" % max(batches))
            print("batch_gap_mean_s    %.4f" % statistics.fmean(bg))
            print("batch_gap_median_s  %.4f" % statistics.median(bg))
    for col, label in ((1, "prompt"), (2, "output")):
        vals = sorted(r[col] for r in rows)
        print("%s_mean         %.1f" % (label, statistics.fmean(vals)))
        print("%s_median       %.1f" % (label, quantile(vals, 0.5)))
        print("%s_min          %d" % (label, vals[0]))
        print("%s_max          %d" % (label, vals[-1]))
        knots = [quantile(vals, q) for q in QUANTILES]
        print("%s_quantiles    %s" % (label, " ".join("%g" % k for k in knots)))
        print("%s_icdf_mean    %.1f" % (label, icdf_mean(knots)))
        if want_c:
            print("C %s: {%s}" % (label, ", ".join("%.1f" % k for k in knots)))
    print()


def main(argv):
    want_c = "--c" in argv
    args = [a for a in argv if not a.startswith("--")]
    here = os.path.dirname(os.path.abspath(__file__))
    d = args[0] if args else os.path.join(here, "..", "..", "shared", "traces")
    print("quantile_levels     %s\n" % " ".join("%g" % q for q in QUANTILES))
    files = [
        ("AzureLLMInferenceTrace_conv.csv", azure),
        ("AzureLLMInferenceTrace_code.csv", azure),
        ("conversation_trace.jsonl", mooncake),
        ("synthetic_trace.jsonl", mooncake),
        ("arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", vidur),
    ]
    for fname, parser in files:
        path = os.path.join(d, fname)
        if os.path.exists(path):
            describe(fname, parser(path), want_c)


if __name__ == "__main__":
    main(sys.argv[1:])
