"""Every ```python block of python/README.md runs as written and prints the
```text block that follows it (when one does)."""

import contextlib
import gc
import io
import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


def examples():
    text = open(README, encoding="utf-8").read()
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    out = []
    for i, (lang, body, start, _) in enumerate(blocks):
        if lang != "python":
            continue
        expected = None
        if i + 1 < len(blocks) and blocks[i + 1][0] == "text":
            between = text[blocks[i][3] : blocks[i + 1][2]]
            if between.strip() == "":
                expected = blocks[i + 1][1]
        line = text.count("\n", 0, start) + 1
        out.append(pytest.param(body, expected, id=f"README.md:{line}"))
    return out


EXAMPLES = examples()


def test_the_readme_has_the_seed_examples():
    assert len(EXAMPLES) >= 10
    bodies = "".join(p.values[0] for p in EXAMPLES)
    for name in (
        "PoolConfig(",
        "allocate(",
        "free(",
        "free_all(",
        "blocks_for(",
        "n_free(",
        "register_owner(",
        "release_owner(",
        "shrink(",
        ".stats",
        ".history",
        "to_prometheus(",
        "snapshot()",
        "BlockPoolExhaustedError",
        "OwnerAlreadyActiveError",
        "BlockStorage(",
        "resident_bytes()",
        "PooledKVCache(",
        "build_pooled_caches(",
        "n_blocks_held()",
    ):
        assert name in bodies, name


@pytest.mark.parametrize("body,expected", EXAMPLES)
def test_readme_example(body, expected):
    out = io.StringIO()
    namespace = {"__name__": "__readme__"}
    with contextlib.redirect_stdout(out):
        exec(compile(body, README, "exec"), namespace)
    namespace.clear()
    gc.collect()
    if expected is not None:
        assert out.getvalue() == expected
