#!/usr/bin/env bash
# tests/cmake_build_test.sh - the CMake build from a plain copy of the tree.
#
#   cmake_build_test.sh BAZEL_SO BAZEL_A
#
# Copies the sources (runfiles, symlinks resolved) into an empty directory and,
# using no Bazel output, runs what a packager runs:
#   cmake -B build -DKVPOOL_BUILD_TESTS=ON -DKVPOOL_WERROR=ON
#   cmake --build build && ctest --test-dir build && cmake --install build --prefix P
# then checks the installed tree:
#   1. the same files as tools/install.sh installs from Bazel's BAZEL_SO and
#      BAZEL_A (python package aside), the headers byte for byte equal to
#      include/kvpool, the .so's SONAME, NEEDED list and exported symbols (name
#      and version) equal to Bazel's libkvpool.so;
#   2. a C program built with pkg-config (shared and static) and one built with
#      CMake's find_package(kvpool) + kvpool::kvpool run and print EXPECTED;
#   3. `pkg-config --libs kvpool` works when kvpool.pc is the only .pc file
#      pkg-config can see (no liburcu or libssl dev package needed to link
#      against the shared library);
#   4. a venv used as the install prefix: `pip install ./python` and
#      `import kvpool` with no variable set load VENV/lib/libkvpool.so.0.
set -euo pipefail

bazel_so=$1 bazel_a=$2
R="$TEST_SRCDIR/$TEST_WORKSPACE"
W="$TEST_TMPDIR"
src="$W/src" build="$W/build" prefix="$W/prefix" ref="$W/ref"
rm -rf "$src" "$build" "$prefix" "$ref" "$W/app"
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

EXPECTED='AllocationStats(in_use=3/64, allocations=3, frees=0, reused=0, exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.016)
AllocationStats(in_use=0/64, allocations=3, frees=3, reused=0, exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.000)'
version=$(sed -n 's/^#define KVP_VERSION[[:space:]]*"\(.*\)"$/\1/p' "$R/include/kvpool/version.h")
[ -n "$version" ] || fail "no KVP_VERSION in include/kvpool/version.h"

# A clean copy: only source files, no bazel-* directory, no build output.
mkdir -p "$src"
# tools/ in the runfiles also holds Bazel's libkvpool.so and .a: only two files of it are taken.
(cd "$R" && find CMakeLists.txt README.md LICENSE CHANGELOG.md include lib cmake tests docs \
	tools/kvpool.pc.in tools/kvpool_headers.py \( -name '*.c' -o -name '*.h' -o -name '*.in' \
	-o -name '*.cmake' -o -name '*.md' -o -name '*.txt' -o -name '*.py' -o -name LICENSE \
	-o -name '*.png' -o -name '*.json' -o -name '*.yml' \) \
	\( -type f -o -type l \) -print) |
	while read -r f; do
		mkdir -p "$src/$(dirname "$f")"
		cp -L "$R/$f" "$src/$f"
	done
[ -f "$src/CMakeLists.txt" ] && [ -f "$src/lib/pool/pool.c" ] || fail "source copy incomplete"

# 0. Configure, build, unit tests, install.
cmake -S "$src" -B "$build" -DKVPOOL_BUILD_TESTS=ON -DKVPOOL_WERROR=ON >"$W/configure.log" 2>&1 ||
	{ cat "$W/configure.log" >&2; fail "cmake configure"; }
cmake --build "$build" -j2 >"$W/build.log" 2>&1 || { tail -50 "$W/build.log" >&2; fail "cmake --build"; }
(cd "$build" && ctest -j2 --output-on-failure >"$W/ctest.log" 2>&1) ||
	{ cat "$W/ctest.log" >&2; fail "ctest"; }
grep -E "tests passed|Total Test" "$W/ctest.log"
n_tests=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\)/\1/p' "$W/ctest.log")
[ "${n_tests:-0}" -ge 20 ] || fail "ctest ran ${n_tests:-0} tests, expected at least 20"
cmake --install "$build" --prefix "$prefix" >"$W/install.log" 2>&1 ||
	{ cat "$W/install.log" >&2; fail "cmake --install"; }
echo "ok cmake: configure, build (-Werror), $n_tests unit tests, install"

# 1. The tree equals tools/install.sh's from Bazel's outputs.
"$R/tools/install.sh" --prefix "$ref" --archive "$bazel_a" --shared "$bazel_so" \
	--headers "$R/include/kvpool" --no-python >/dev/null
diff <(cd "$ref" && find . | sort) <(cd "$prefix" && find . | sort) ||
	fail "the CMake install tree differs from tools/install.sh's (< install.sh, > cmake)"
diff -r "$R/include/kvpool" "$prefix/include/kvpool" || fail "installed headers differ"
diff "$ref/lib/pkgconfig/kvpool.pc" <(sed "s|$prefix|$ref|g" "$prefix/lib/pkgconfig/kvpool.pc") ||
	fail "kvpool.pc differs"
for f in kvpoolConfig kvpoolConfigVersion; do
	cmp "$ref/lib/cmake/kvpool/$f.cmake" "$prefix/lib/cmake/kvpool/$f.cmake" || fail "$f.cmake"
done
[ "$(readlink "$prefix/lib/libkvpool.so.0")" = "libkvpool.so.$version" ] || fail "so.0 link"
[ "$(readlink "$prefix/lib/libkvpool.so")" = libkvpool.so.0 ] || fail "libkvpool.so link"
so="$prefix/lib/libkvpool.so.$version"
soname() { objdump -p "$1" | awk '$1 == "SONAME" { print $2 }'; }
[ "$(soname "$so")" = libkvpool.so.0 ] || fail "SONAME is '$(soname "$so")'"
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -v '^ld-linux' | sort; }
diff <(needed "$bazel_so") <(needed "$so") || fail "NEEDED differs from Bazel's"
exports() {
	# GNU ld also lists the version node itself (KVPOOL_0 KVPOOL_0, ABS); lld does not.
	objdump -T "$1" | awk '/^[0-9a-f]+ / && $0 !~ /\*UND\*/ && $NF != "KVPOOL_0" { print $(NF-1), $NF }' |
		sort
}
exports "$so" >"$W/cmake.exports"
exports "$bazel_so" >"$W/bazel.exports"
diff "$W/bazel.exports" "$W/cmake.exports" || fail "exported symbols differ (< bazel, > cmake)"
n_exports=$(wc -l <"$W/cmake.exports")
[ "$n_exports" -ge 40 ] || fail "only $n_exports exports"
echo "ok tree: same files as install.sh, headers equal, $n_exports exports equal to Bazel's," \
	"NEEDED $(needed "$so" | tr '\n' ' ')"

# 2. Programs against the installed tree.
mkdir -p "$W/app"
cp "$R/tests/install_app.c" "$W/app/app.c"
cd "$W/app"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion kvpool)" = "$version" ] || fail "kvpool.pc version"
# shellcheck disable=SC2046 # pkg-config output is meant to be split
cc -std=c11 -Wall -Wextra -Werror -o app app.c $(pkg-config --cflags --libs kvpool)
out=$(LD_LIBRARY_PATH="$prefix/lib" ./app) || fail "pkg-config app exited with $?"
[ "$out" = "$EXPECTED" ] || fail "pkg-config app printed '$out'"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -o app_static app.c $(pkg-config --cflags kvpool) \
	"$prefix/lib/libkvpool.a" $(pkg-config --static --libs kvpool | sed 's/-lkvpool//')
out=$(./app_static) || fail "static app exited with $?"
[ "$out" = "$EXPECTED" ] || fail "static app printed '$out'"
echo "ok pkg-config: shared and static programs"
# The headers in strict C99 (no repeated typedef: a C11 feature) and C++; the
# running library's kvp_version() is the headers' and the .pc's version.
printf '%s\n' '#include <kvpool/kvpool.h>' '#include <stdio.h>' \
	'int main(void) { printf("%s %s\n", kvp_version(), KVP_VERSION); return 0; }' >ver.c
# shellcheck disable=SC2046
cc -std=c99 -pedantic -Wall -Wextra -Werror -o ver ver.c $(pkg-config --cflags --libs kvpool) ||
	fail "the installed headers do not compile with -std=c99 -pedantic -Werror"
# shellcheck disable=SC2046
c++ -x c++ -std=c++11 -pedantic -Wall -Werror -fsyntax-only ver.c $(pkg-config --cflags kvpool) ||
	fail "the installed headers do not compile as C++11"
# Their kernel-doc comments read cleanly to clang's documentation checker too
# (an @name it would take for a Doxygen command, e.g. "@refs" at a line's end).
if command -v clang >/dev/null; then
	# shellcheck disable=SC2046
	clang -std=c11 -Wdocumentation -Werror -fsyntax-only ver.c $(pkg-config --cflags kvpool) ||
		fail "the installed headers warn under clang -Wdocumentation"
fi
out=$(LD_LIBRARY_PATH="$prefix/lib" ./ver)
[ "$out" = "$version $version" ] || fail "kvp_version() and KVP_VERSION: '$out', .pc: $version"
echo "ok version: kvp_version() = KVP_VERSION = kvpool.pc = $version; headers pass -std=c99 -pedantic, C++11, -Wdocumentation"
mkdir -p cmake_src
cp "$R/tests/cmake_app/CMakeLists.txt" cmake_src/
cp app.c cmake_src/app.c
want=${version%.*}
cmake -S cmake_src -B cmake_build -DCMAKE_PREFIX_PATH="$prefix" -DKVPOOL_WANT="$want" \
	>cmake_app.log 2>&1 || { cat cmake_app.log >&2; fail "find_package project configure"; }
grep -q "kvpool $version from $prefix/lib/cmake/kvpool" cmake_app.log ||
	{ cat cmake_app.log >&2; fail "find_package did not find the CMake-installed kvpool"; }
cmake --build cmake_build >cmake_app_build.log 2>&1 ||
	{ cat cmake_app_build.log >&2; fail "find_package project build"; }
out=$(env -u LD_LIBRARY_PATH cmake_build/app) || fail "find_package app exited with $?"
[ "$out" = "$EXPECTED" ] || fail "find_package app printed '$out'"
out=$(cmake_build/app_static) || fail "find_package app_static exited with $?"
[ "$out" = "$EXPECTED" ] || fail "find_package app_static printed '$out'"
echo "ok find_package(kvpool $want): kvpool::kvpool and kvpool::kvpool_static"

# 3. kvpool.pc alone: dynamic linking needs no other .pc file.
libs=$(PKG_CONFIG_LIBDIR="$prefix/lib/pkgconfig" PKG_CONFIG_PATH= pkg-config --libs kvpool 2>&1) ||
	fail "pkg-config --libs kvpool needs other .pc files: $libs"
echo "ok kvpool.pc alone: pkg-config --libs kvpool = $libs"

# 4. Python after the CMake install: a venv used as the prefix, then
# `pip install ./python` and `import kvpool` with no variable set.
py=/usr/bin/python3
v="$W/venv"
rm -rf "$v" "$W/pysrc"
"$py" -m venv --system-site-packages "$v"
cmake --install "$build" --prefix "$v" >/dev/null || fail "cmake --install into the venv"
mkdir -p "$W/pysrc/kvpool" "$W/cwd"
cp -L "$R"/python/{pyproject.toml,setup.py,_kvpool_build.py,README.md} "$W/pysrc/"
cp -L "$R"/python/kvpool/*.py "$W/pysrc/kvpool/"
env -u PKG_CONFIG_PATH -u KVPOOL_LIBRARY -u KVPOOL_LIB -u KVPOOL_PREFIX PIP_NO_INDEX=1 \
	"$v/bin/pip" install -q --no-build-isolation --no-index "$W/pysrc" >"$W/pip.log" 2>&1 ||
	{ cat "$W/pip.log" >&2; fail "pip install ./python into the venv"; }
got=$(cd "$W/cwd" && env -u PKG_CONFIG_PATH -u KVPOOL_LIBRARY -u KVPOOL_LIB -u PYTHONPATH \
	"$v/bin/python" -c 'import kvpool; print(kvpool.__version__, kvpool.library_path)')
[ "$got" = "$version $v/lib/libkvpool.so.0" ] || fail "import kvpool after the CMake install: '$got'"
echo "ok python: cmake --install --prefix VENV, pip install ./python, import kvpool ($got)"
