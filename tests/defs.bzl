"""kvp_c_test: a cc_test linked statically against //:kvpool."""

def kvp_c_test(name, srcs, deps = [], size = "small", timeout = None, tags = [], args = [], data = [], copts = [], linkopts = []):
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
    )
