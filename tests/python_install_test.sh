#!/usr/bin/env bash
# tests/python_install_test.sh - the Python package as a user installs it,
# offline: tools/install.sh into an empty prefix, then in two fresh virtual
# environments of Debian's python3,
#   A: python3 -m venv --system-site-packages   (numpy from python3-numpy)
#   B: python3 -m venv                          (no numpy, no `wheel` package)
# `pip install --no-build-isolation --no-index ./python` (PKG_CONFIG_PATH set,
# as after install.sh), then from an empty directory with no KVPOOL_LIBRARY:
#   - kvpool.__version__ == the package's metadata version == KVP_VERSION of the
#     headers, and the library loaded is PREFIX/lib/libkvpool.so.0;
#   - every pool example of python/README.md runs and prints its text block in
#     both; the storage examples run in A and fail naming numpy in B
#     (tests/readme_examples.py).
# C: install.sh --prefix VENV, then pip install with no variable set; the
# Python text of two pools passes promtool.  D: a wheel bundling
# libkvpool.so.0 loads its own copy.
# Plain configuration only: a sanitized libkvpool.so cannot be loaded by an
# uninstrumented python3 (the sanitizer runs cover the package through
# //python:pytest).
set -euo pipefail

R="$TEST_SRCDIR/$TEST_WORKSPACE"
work="$TEST_TMPDIR/py"
prefix="$work/prefix"
rm -rf "$work"
mkdir -p "$work/cwd"
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
py=/usr/bin/python3

"$R/tools/install.sh" --prefix "$prefix" --archive "$R/tools/libkvpool.a" \
	--shared "$R/tools/libkvpool.so" --headers "$R/include/kvpool" --python "$py"
# pip builds in the source directory: give it a writable copy of python/.
mkdir -p "$work/src"
cp -L "$R"/python/{pyproject.toml,setup.py,_kvpool_build.py,README.md} "$work/src/"
mkdir "$work/src/kvpool"
cp -L "$R"/python/kvpool/*.py "$work/src/kvpool/"
want=$(sed -n 's/^#define KVP_VERSION[[:space:]]*"\(.*\)"$/\1/p' "$R/include/kvpool/version.h")
[ -n "$want" ] || fail "no KVP_VERSION in version.h"

unset PYTHONPATH KVPOOL_LIB KVPOOL_LIBRARY
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
for venv in A B; do
	v="$work/venv$venv"
	if [ $venv = A ]; then
		"$py" -m venv --system-site-packages "$v"
		numpy=with-numpy
	else
		"$py" -m venv "$v"
		numpy=without-numpy
		if "$v/bin/python" -c 'import numpy' 2>/dev/null; then fail "venv B has numpy"; fi
	fi
	PKG_CONFIG_PATH="$prefix/lib/pkgconfig" "$v/bin/pip" install -q --no-build-isolation \
		--no-index "$work/src" >"$work/pip$venv.log" 2>&1 ||
		{ cat "$work/pip$venv.log" >&2; fail "pip install in venv $venv"; }
	got=$(cd "$work/cwd" && "$v/bin/python" -c '
import importlib.metadata, sys, kvpool
print(kvpool.__version__, importlib.metadata.version("kvpool"), kvpool.library_path,
      "numpy" in sys.modules)')
	[ "$got" = "$want $want $prefix/lib/libkvpool.so.0 False" ] ||
		fail "venv $venv: version/library/numpy: '$got', expected '$want $want $prefix/lib/libkvpool.so.0 False'"
	echo "ok venv $venv: pip install; kvpool $want from $prefix/lib/libkvpool.so.0; import kvpool loads no numpy"
	(cd "$work/cwd" && "$v/bin/python" "$R/tests/readme_examples.py" "$R/python/README.md" $numpy) ||
		fail "venv $venv: README examples"
done

# C: a virtual environment used as the install prefix (install.sh --prefix VENV),
# then pip install with no variable set: the build finds VENV/lib by itself.
v="$work/venvC"
"$py" -m venv --system-site-packages "$v"
"$R/tools/install.sh" --prefix "$v" --archive "$R/tools/libkvpool.a" \
	--shared "$R/tools/libkvpool.so" --headers "$R/include/kvpool" --no-python >/dev/null
env -u PKG_CONFIG_PATH "$v/bin/pip" install -q --no-build-isolation --no-index "$work/src" \
	>"$work/pipC.log" 2>&1 || { cat "$work/pipC.log" >&2; fail "pip install in venv C"; }
got=$(cd "$work/cwd" && env -u PKG_CONFIG_PATH "$v/bin/python" -c '
import kvpool; print(kvpool.__version__, kvpool.library_path)')
[ "$got" = "$want $v/lib/libkvpool.so.0" ] || fail "venv C: '$got'"
echo "ok venv C (the prefix): pip install with no variable set; kvpool $want from $v/lib"
# Its Prometheus text (two pools, per-stream, config and build families) passes promtool.
(cd "$work/cwd" && "$v/bin/python" -c '
import kvpool
a = kvpool.BlockPoolAllocator(kvpool.PoolConfig(block_size=16, n_blocks=64))
b = kvpool.BlockPoolAllocator(kvpool.PoolConfig(block_size=16, n_blocks=32, separate_kv=False))
a.allocate("k", 40, 1)
print(kvpool.to_prometheus({"a": a, "b": b}), end="")') >"$work/two.prom"
promtool check metrics <"$work/two.prom" || fail "promtool rejects the Python text"
for fam in 'kvpool_stream_blocks_in_use{pool="a",stream="k"} 3' 'kvpool_config_info{pool="b",' \
	"kvpool_build_info{version=\"$want\"} 1"; do
	grep -qF "$fam" "$work/two.prom" || fail "the Python text lacks $fam"
done
echo "ok venv C: kvpool.to_prometheus of two pools passes promtool check metrics"

# D: a wheel that bundles libkvpool.so.0, installed where no library is.
cp -r "$work/src" "$work/srcD"
cp -L "$R/tools/libkvpool.so" "$work/srcD/kvpool/libkvpool.so.0"
v="$work/venvD"
"$py" -m venv "$v"
env -u PKG_CONFIG_PATH "$v/bin/pip" wheel -q --no-build-isolation --no-index -w "$work/wheels" \
	"$work/srcD" >"$work/pipD.log" 2>&1 || { cat "$work/pipD.log" >&2; fail "pip wheel (D)"; }
"$py" -c 'import sys, zipfile; sys.exit("kvpool/libkvpool.so.0" not in zipfile.ZipFile(sys.argv[1]).namelist())' \
	"$work"/wheels/kvpool-*.whl ||
	fail "the wheel does not carry kvpool/libkvpool.so.0"
"$v/bin/pip" install -q --no-index "$work"/wheels/kvpool-*.whl >>"$work/pipD.log" 2>&1 ||
	{ cat "$work/pipD.log" >&2; fail "pip install of the wheel (D)"; }
got=$(cd "$work/cwd" && env -u PKG_CONFIG_PATH "$v/bin/python" -c '
import kvpool; print(kvpool.__version__, kvpool.library_path)')
case "$got" in
"$want $v/lib/python3."*"/site-packages/kvpool/libkvpool.so.0") ;;
*) fail "venv D (bundled wheel): '$got'" ;;
esac
echo "ok venv D: a wheel bundling libkvpool.so.0 loads its own copy: $got"
