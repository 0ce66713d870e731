"""Test helpers: kvp_c_test, kvp_replay_test, kvp_skip_under."""

def kvp_c_test(name, srcs, deps = [], size = "small", timeout = None, tags = [], args = [], data = [], copts = [], linkopts = [], **kwargs):
    """A cc_test linked statically against //:kvpool.

    Runs in all three ./test.sh configs (plain, asan, tsan).  Extra keyword
    arguments (env, shard_count, flaky, target_compatible_with, ...) go to cc_test.
    """
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = ["//:kvpool"] + deps,
        size = size,
        timeout = timeout,
        tags = tags,
        args = args,
        data = data,
        copts = copts,
        linkopts = linkopts,
        linkstatic = True,
        **kwargs
    )

def kvp_skip_under(*configs):
    """A target_compatible_with value that skips a target under the named configs.

    kvp_skip_under("asan", "tsan") leaves the target out of --config=asan and
    --config=tsan: Bazel reports it SKIPPED there, and ./test.sh counts it as
    neither passed nor failed.  Use it only for what a sanitizer cannot run
    (e.g. python3 loading a sanitized libkvpool.so), and say why beside it.
    """
    conditions = {"//tools:" + c: ["//tools:incompatible"] for c in configs}
    conditions["//conditions:default"] = []
    return select(conditions)

def kvp_replay_test(name, script = None, args = [], data = [], size = "medium", testlib = True, **kwargs):
    """An sh_test of //stress:kvpool_replay.

    The script (default: name + ".sh") gets the replay's path as its first
    argument, then args; its data are the replay, tests/replay_testlib.sh
    (which the script sources; testlib = False leaves it out) and data.
    args may be a select().  size defaults to Bazel's own default, medium.
    Extra keyword arguments (env, tags, target_compatible_with, ...) go to
    sh_test.
    """
    native.sh_test(
        name = name,
        size = size,
        srcs = [script or name + ".sh"],
        args = ["$(location //stress:kvpool_replay)"] + args,
        data = (["replay_testlib.sh"] if testlib else []) + ["//stress:kvpool_replay"] + data,
        **kwargs
    )
