"""Bazel entry point of //python:pytest: runs the binding's pytest suite.

    run_pytest.py [--sanitizer=asan|tsan] [--launcher=PATH] [pytest args...]

Runs ``python -m pytest python/tests`` against the package in python/kvpool
and the libkvpool.so that Bazel built (//tools:libkvpool_testing.so, the
shipped library plus the fault-injection hook, given to the package through
KVPOOL_LIB).  The interpreter is /usr/bin/python3 (the one
running this script), except under a sanitizer: then it is the launcher
(//python:pyembed, Debian's libpython linked into an executable that carries
the sanitizer runtime; see pyembed.c), with

- asan: LeakSanitizer on, allocation stacks cut to the innermost frames and
  the interpreter's own allocations suppressed (lsan.supp), so a leak of
  memory the C library allocated is still reported;
- tsan: the options Bazel's test environment sets (.bazelrc), plus the
  suppressions of tsan.supp (none at present).
"""

import os
import sys


def main(argv):
    sanitizer = None
    launcher = None
    rest = []
    for a in argv:
        if a.startswith("--sanitizer="):
            sanitizer = a.split("=", 1)[1] or None
        elif a.startswith("--launcher="):
            launcher = a.split("=", 1)[1]
        else:
            rest.append(a)

    tests_dir = os.path.dirname(os.path.abspath(__file__))  # <runfiles>/kvpool/python/tests
    pkg_root = os.path.dirname(tests_dir)  # .../python
    ws_root = os.path.dirname(pkg_root)  # <runfiles>/kvpool

    env = dict(os.environ)
    env["KVPOOL_LIB"] = os.path.join(ws_root, "tools", "libkvpool_testing.so")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [pkg_root, env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # runfiles are read-only

    interp = sys.executable
    if sanitizer:
        if sanitizer not in ("asan", "tsan") or not launcher:
            sys.exit(f"run_pytest: bad --sanitizer={sanitizer} / --launcher={launcher}")
        interp = os.path.join(ws_root, launcher)
        if sanitizer == "asan":
            opts = env.get("ASAN_OPTIONS", "")
            extra = ["detect_leaks=1", "malloc_context_size=8"]
            env["ASAN_OPTIONS"] = ":".join(filter(None, [opts] + extra))
            supp = os.path.join(tests_dir, "lsan.supp")
            env["LSAN_OPTIONS"] = f"suppressions={supp}:print_suppressions=0"
        else:  # tsan.supp: the suppressions, if any
            supp = os.path.join(tests_dir, "tsan.supp")
            opts = env.get("TSAN_OPTIONS", "")
            env["TSAN_OPTIONS"] = ":".join(filter(None, [opts, f"suppressions={supp}"]))

    args = [interp, "-m", "pytest", tests_dir, "-p", "no:cacheprovider", "-ra", "-v"]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append("--junitxml=" + xml)
    args += rest
    print("run_pytest:", " ".join(args), f"(KVPOOL_LIB={env['KVPOOL_LIB']})", flush=True)
    os.execve(interp, args, env)


if __name__ == "__main__":
    main(sys.argv[1:])
