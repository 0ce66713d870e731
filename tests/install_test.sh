#!/usr/bin/env bash
# tests/install_test.sh - tools/install.sh end to end, minus the Bazel build
# (Bazel cannot run inside a Bazel test): install the Bazel-built libkvpool.a,
# libkvpool.so and headers into an empty prefix with tools/install.sh, then
# build a program the way a server's Makefile would and run it:
#   1. cc app.c $(pkg-config --cflags --libs kvpool)    -> libkvpool.so, found by rpath
#   2. cc app.c ... DIR/lib/libkvpool.a $(pkg-config --static --libs ...) -> static
# Each must print EXPECTED: the seed's line (API.md) after allocating 40 tokens
# of stream K on a 64-block pool of 16-token blocks, then the line after
# kvp_free_all.  $1 is the Bazel config: none, asan or tsan (the program is
# then built with clang and the same -fsanitize flags as the library).
set -euo pipefail

EXPECTED='AllocationStats(in_use=3/64, allocations=3, frees=0, reused=0, exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.016)
AllocationStats(in_use=0/64, allocations=3, frees=3, reused=0, exhausted=0, grown=0, retired=0, peak=3, fragmentation=0.000)'

san=${1:-none}
R="$TEST_SRCDIR/$TEST_WORKSPACE"
prefix="$TEST_TMPDIR/prefix"
work="$TEST_TMPDIR/work"
rm -rf "$prefix" "$work"
mkdir -p "$work"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

"$R/tools/install.sh" --prefix "$prefix" --archive "$R/tools/libkvpool.a" \
	--shared "$R/tools/libkvpool.so" --headers "$R/include/kvpool"
for f in include/kvpool/kvpool.h include/kvpool/pool.h lib/libkvpool.a lib/libkvpool.so \
	lib/pkgconfig/kvpool.pc; do
	[ -f "$prefix/$f" ] || fail "install.sh did not install $f"
done

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --validate kvpool || fail "kvpool.pc does not validate"
[ "$(pkg-config --modversion kvpool)" = 0.1.0 ] || fail "kvpool.pc version"

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
readelf -d app | grep -q 'NEEDED.*\[libkvpool\.so\]' || fail "app does not use libkvpool.so"
out=$(env -u LD_LIBRARY_PATH ./app) || fail "app exited with $?"
[ "$out" = "$EXPECTED" ] || fail "shared app printed '$out', expected '$EXPECTED'"
echo "ok shared:"; echo "$out"

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
