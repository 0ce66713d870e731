#!/usr/bin/env bash
# tests/install_test.sh - tools/install.sh end to end, minus the Bazel build
# (Bazel cannot run inside a Bazel test): install the Bazel-built libkvpool.a,
# libkvpool.so and headers into an empty prefix with tools/install.sh, then
# build a program the way a server's Makefile or CMakeLists.txt would and run it:
#   1. cc app.c $(pkg-config --cflags --libs kvpool)  -> libkvpool.so.0 via LD_LIBRARY_PATH
#      (no rpath by default), and again after install.sh --rpath -> found by rpath
#   2. cc app.c ... DIR/lib/libkvpool.a $(pkg-config --static --libs ...) -> static
#   3. CMake: find_package(kvpool MAJOR.MINOR REQUIRED) + kvpool::kvpool (tests/cmake_app),
#      shared and static
#   4. the man pages: one per public function, `man -l kvp_allocate.3` renders
# Each must print EXPECTED: kvp_stats_format's line (the example documented in
# include/kvpool/stats.h) after allocating 40 tokens
# of stream K on a 64-block pool of 16-token blocks, then the line after
# kvp_free_all.  $1 is the Bazel config: none, asan or tsan (the program is
# then built with clang and the same -fsanitize flags as the library).
set -euo pipefail

EXPECTED='AllocationStats(in_use=3/64, allocations=3, frees=0, reused=0, exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.016)
AllocationStats(in_use=0/64, allocations=3, frees=3, reused=0, exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.000)'

san=${1:-none}
R="$TEST_SRCDIR/$TEST_WORKSPACE"
# The version is include/kvpool/version.h's; nothing here repeats it.
version=$(sed -n 's/^#define KVP_VERSION[[:space:]]*"\(.*\)"$/\1/p' "$R/include/kvpool/version.h")
want=${version%.*}
prefix="$TEST_TMPDIR/prefix"
work="$TEST_TMPDIR/work"
rm -rf "$prefix" "$work"
mkdir -p "$work"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

install() {
	"$R/tools/install.sh" --prefix "$prefix" --archive "$R/tools/libkvpool.a" \
		--shared "$R/tools/libkvpool.so" --headers "$R/include/kvpool" --no-python "$@"
}
install
for f in include/kvpool/kvpool.h include/kvpool/pool.h lib/libkvpool.a lib/libkvpool.so \
	lib/libkvpool.so.0 "lib/libkvpool.so.$version" lib/pkgconfig/kvpool.pc \
	lib/cmake/kvpool/kvpoolConfig.cmake lib/cmake/kvpool/kvpoolConfigVersion.cmake \
	share/man/man3/kvp_allocate.3; do
	[ -f "$prefix/$f" ] || fail "install.sh did not install $f"
done
[ "$(readlink "$prefix/lib/libkvpool.so.0")" = "libkvpool.so.$version" ] || fail "libkvpool.so.0 link"
[ "$(readlink "$prefix/lib/libkvpool.so")" = libkvpool.so.0 ] || fail "libkvpool.so link"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --validate kvpool || fail "kvpool.pc does not validate"
[ "$(pkg-config --modversion kvpool)" = "$version" ] || fail "kvpool.pc version"

case "$san" in
none) CC=cc sanflags=() ;;
asan) CC=clang sanflags=(-fsanitize=address,undefined -fno-sanitize-recover=all) ;;
tsan) CC=clang sanflags=(-fsanitize=thread) ;;
*) fail "unknown config $san" ;;
esac
cp "$R/tests/install_app.c" "$work/app.c"
cd "$work"

# 1. Shared: exactly the command of the README.
# shellcheck disable=SC2046 # pkg-config output is meant to be split
"$CC" -std=c11 -Wall -Wextra -Werror ${sanflags[@]+"${sanflags[@]}"} -o app app.c \
	$(pkg-config --cflags --libs kvpool)
readelf -d app | grep -q 'NEEDED.*\[libkvpool\.so\.0\]' || fail "app does not use libkvpool.so.0"
if readelf -d app | grep -qE 'R(UN)?PATH'; then fail "the .pc put an rpath without --rpath"; fi
out=$(LD_LIBRARY_PATH="$prefix/lib" ./app) || fail "app exited with $?"
[ "$out" = "$EXPECTED" ] || fail "shared app printed '$out', expected '$EXPECTED'"
echo "ok shared (LD_LIBRARY_PATH):"; echo "$out"

# --rpath: the .pc adds DIR/lib to the rpath; the program runs without LD_LIBRARY_PATH.
(cd "$R" && install --rpath) >/dev/null
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Wextra -Werror ${sanflags[@]+"${sanflags[@]}"} -o app_rpath app.c \
	$(pkg-config --cflags --libs kvpool)
readelf -d app_rpath | grep -qE "R(UN)?PATH.*\[$prefix/lib\]" || fail "--rpath: no rpath"
out=$(env -u LD_LIBRARY_PATH ./app_rpath) || fail "app_rpath exited with $?"
[ "$out" = "$EXPECTED" ] || fail "rpath app printed '$out'"
echo "ok shared (--rpath)"

# 2. Static: the archive plus the private dependencies the .pc declares.
static_libs=$(pkg-config --static --libs-only-l kvpool | sed 's/-lkvpool//')
# shellcheck disable=SC2046,SC2086
"$CC" -std=c11 -Wall -Wextra -Werror ${sanflags[@]+"${sanflags[@]}"} -o app_static app.c \
	$(pkg-config --cflags kvpool) "$prefix/lib/libkvpool.a" \
	$(pkg-config --static --libs-only-L kvpool) $static_libs
if readelf -d app_static | grep -q 'NEEDED.*libkvpool'; then
	fail "app_static depends on libkvpool.so"
fi
out=$(./app_static) || fail "app_static exited with $?"
[ "$out" = "$EXPECTED" ] || fail "static app printed '$out', expected '$EXPECTED'"
echo "ok static:"; echo "$out"

# 3. CMake: the package config and its imported targets.
mkdir -p "$work/cmake_src"
cp "$R/tests/cmake_app/CMakeLists.txt" "$work/cmake_src/"
cp "$R/tests/install_app.c" "$work/cmake_src/app.c"
cmake -S "$work/cmake_src" -B "$work/cmake_build" -DCMAKE_PREFIX_PATH="$prefix" \
	-DKVPOOL_WANT="$want" \
	-DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="${sanflags[*]:-}" \
	-DCMAKE_EXE_LINKER_FLAGS="${sanflags[*]:-}" >"$work/cmake.log" 2>&1 ||
	{ cat "$work/cmake.log" >&2; fail "cmake configure failed"; }
grep -q "kvpool $version from $prefix/lib/cmake/kvpool" "$work/cmake.log" ||
	{ cat "$work/cmake.log" >&2; fail "find_package did not find the installed kvpool"; }
cmake --build "$work/cmake_build" >"$work/build.log" 2>&1 ||
	{ cat "$work/build.log" >&2; fail "cmake --build failed"; }
readelf -d "$work/cmake_build/app" | grep -q 'NEEDED.*\[libkvpool\.so\.0\]' ||
	fail "the CMake app does not use libkvpool.so.0"
out=$(env -u LD_LIBRARY_PATH "$work/cmake_build/app") || fail "CMake app exited with $?"
[ "$out" = "$EXPECTED" ] || fail "CMake app printed '$out'"
out=$("$work/cmake_build/app_static") || fail "CMake app_static exited with $?"
[ "$out" = "$EXPECTED" ] || fail "CMake app_static printed '$out'"
echo "ok cmake: find_package(kvpool $want) + kvpool::kvpool and kvpool::kvpool_static"
# A version the package does not satisfy is refused.
if cmake -S "$work/cmake_src" -B "$work/cmake_build2" -DCMAKE_PREFIX_PATH="$prefix" \
	-DKVPOOL_WANT=1.0 \
	>"$work/cmake2.log" 2>&1; then
	fail "find_package(kvpool 1.0) accepted kvpool $version"
fi
echo "ok cmake: find_package(kvpool 1.0) refused"

# 4. Man pages: one per public function, and the overview pages; groff finds
# nothing to warn about in any of them; man -l renders kvp_allocate.3.
man3="$prefix/share/man/man3"
"$R/tools/kvpool_headers.py" functions "$prefix"/include/kvpool/*.h >"$work/functions"
n=0 pages=()
while read -r f; do
	[ -f "$man3/$f.3" ] || fail "no man page for $f"
	pages+=("$man3/$f.3")
	n=$((n + 1))
done <"$work/functions"
[ "$n" -ge 40 ] || fail "only $n public functions"
# The overview pages: kvpool(3), one per header (its opening comment, with the
# synchronization table), one per struct and enum (its definition).
for f in kvpool kvpool_pool kvpool_prefix kvp_pool_config kvp_stats kvp_status kvp_stream; do
	[ -f "$man3/$f.3" ] || fail "no man page $f.3"
done
pages=("$man3"/*.3)
grep -q "Synchronization" "$man3/kvpool_pool.3" || fail "kvpool_pool.3 lacks the synchronization table"
grep -q "grow_on_exhaustion" "$man3/kvp_pool_config.3" || fail "kvp_pool_config.3 lacks the fields"
grep -q "kvpool_pool" "$man3/kvp_allocate.3" || fail "kvp_allocate.3 does not name kvpool_pool(3)"
# NAME lines are plain text: no kernel-doc '@' left in them.
for p in "${pages[@]}"; do
	sed -n '/^\.SH NAME/{n;p;}' "$p" | grep -q "@" && fail "$(basename "$p"): '@' in NAME"
done
# The documentation the README and the headers name, under share/doc/kvpool/docs.
for f in DESIGN.md PREFIX.md REPLAY.md grafana/kvpool.json prometheus/kvpool-alerts.yml; do
	[ -f "$prefix/share/doc/kvpool/docs/$f" ] || fail "share/doc/kvpool/docs/$f not installed"
done
warn=$(groff -man -Tutf8 -ww -z "${pages[@]}" 2>&1) || fail "groff failed: $warn"
[ -z "$warn" ] || fail "groff warns: $warn"
page=$(MANWIDTH=80 man -l "$man3/kvp_allocate.3") || fail "man -l kvp_allocate.3 failed"
for want in "kvp_allocate - hand blocks to an owner" "#include <kvpool/pool.h>" "RETURN VALUE" \
	"KVP_EEXHAUSTED" "n_tokens"; do
	grep -qF -- "$want" <<<"$page" || fail "man kvp_allocate lacks '$want'"
done
echo "ok man: $n pages; man -l kvp_allocate.3:"
sed -n 1,6p <<<"$page"
