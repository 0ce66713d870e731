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
