"""Run the ```python examples of python/README.md with this interpreter.

    readme_examples.py README.md with-numpy|without-numpy

Each example runs in a fresh interpreter (this one, sys.executable) from an
empty directory, and must print the ```text block that follows it, if any.
An example that uses numpy, BlockStorage or a KV cache is a storage example;
the others are pool examples.
  with-numpy:    every example passes.
  without-numpy: every pool example passes; every storage example fails with
                 ModuleNotFoundError naming numpy; and BlockStorage, made
                 without importing numpy first, raises kvpool's own message.
Prints one line per example; exits 1 if any check fails.
"""

import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
STORAGE = re.compile(r"numpy|BlockStorage|KVCache|build_pooled_caches")


def examples(path):
    text = open(path, encoding="utf-8").read()
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    for i, (lang, body, start, end) in enumerate(blocks):
        if lang != "python":
            continue
        expected = None
        if i + 1 < len(blocks) and blocks[i + 1][0] == "text":
            if text[end : blocks[i + 1][2]].strip() == "":
                expected = blocks[i + 1][1]
        yield text.count("\n", 0, start) + 1, body, expected


def run(code, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVPOOL_LIB")}
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def main(readme, mode):
    failures = 0
    n_pool = n_storage = 0
    with tempfile.TemporaryDirectory() as cwd:
        for line, body, expected in examples(readme):
            storage = bool(STORAGE.search(body))
            n_storage += storage
            n_pool += not storage
            r = run(body, cwd)
            if storage and mode == "without-numpy":
                ok = r.returncode != 0 and "ModuleNotFoundError" in r.stderr and "numpy" in r.stderr
                what = "storage example fails naming numpy"
            else:
                ok = r.returncode == 0 and (expected is None or r.stdout == expected)
                what = ("storage" if storage else "pool") + " example runs" + (
                    " and prints its text block" if expected is not None else "")
            print(f"{'ok  ' if ok else 'FAIL'} README.md:{line}: {what}")
            if not ok:
                failures += 1
                print(f"  exit {r.returncode}\n  stdout: {r.stdout!r}\n  expected: {expected!r}"
                      f"\n  stderr: {r.stderr[-2000:]}")
        if mode == "without-numpy":
            r = run("from kvpool import BlockPoolAllocator, BlockStorage, PoolConfig\n"
                    "BlockStorage(BlockPoolAllocator(PoolConfig(n_blocks=4)), head_dim=8)\n", cwd)
            ok = r.returncode != 0 and "kvpool: BlockStorage needs numpy" in r.stderr \
                and "python3-numpy" in r.stderr
            print(f"{'ok  ' if ok else 'FAIL'} BlockStorage without numpy says: "
                  f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else '(nothing)'}")
            failures += not ok
    if n_pool < 8 or n_storage < 3:
        print(f"FAIL: only {n_pool} pool and {n_storage} storage examples found")
        failures += 1
    print(f"{n_pool} pool examples, {n_storage} storage examples, {failures} failures ({mode})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
