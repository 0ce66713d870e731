#!/usr/bin/env bash
# tools/install.sh - build kvpool (plain -O2 config) and install it.
#
#   tools/install.sh --prefix DIR
#
# installs
#   DIR/include/kvpool/*.h          the public headers
#   DIR/lib/libkvpool.a             every object of //:kvpool (bazel-bin/libkvpool.a)
#   DIR/lib/libkvpool.so            //tools:libkvpool.so: self-contained, exports kvp_* only
#   DIR/lib/pkgconfig/kvpool.pc     from tools/kvpool.pc.in
# so that, with PKG_CONFIG_PATH=DIR/lib/pkgconfig,
#   cc app.c $(pkg-config --cflags --libs kvpool)
# links against libkvpool.so and runs (the .pc puts DIR/lib in the rpath).
#
# Already-built files can be given instead of building (the install test does):
#   tools/install.sh --prefix DIR --archive libkvpool.a --shared libkvpool.so --headers DIR
set -euo pipefail

usage() {
	echo "usage: $0 --prefix DIR [--archive FILE.a --shared FILE.so --headers DIR]" >&2
	exit 2
}

prefix= archive= shared= headers=
while [ $# -gt 0 ]; do
	case "$1" in
	--prefix | --archive | --shared | --headers)
		[ $# -ge 2 ] || usage
		declare "${1#--}=$2"
		shift 2
		;;
	--prefix=* | --archive=* | --shared=* | --headers=*)
		v=${1#--}
		declare "${v%%=*}=${v#*=}"
		shift
		;;
	-h | --help) usage ;;
	*) usage ;;
	esac
done
[ -n "$prefix" ] || usage

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
prefix=$(abs "$prefix")

if [ -z "$archive$shared$headers" ]; then
	cd "$root"
	tools/setup.sh
	# The plain configuration of .bazelrc (-O2); install.sh never installs a sanitized build.
	bazel build --noshow_progress --ui_event_filters=-info //:kvpool //tools:libkvpool.so
	bin=$(bazel info bazel-bin 2>/dev/null)
	archive=$bin/libkvpool.a
	shared=$bin/tools/libkvpool.so
	headers=$root/include/kvpool
	cd - >/dev/null
elif [ -z "$archive" ] || [ -z "$shared" ] || [ -z "$headers" ]; then
	echo "install.sh: --archive, --shared and --headers go together" >&2
	exit 2
fi
for f in "$archive" "$shared" "$headers"/kvpool.h; do
	[ -e "$f" ] || { echo "install.sh: missing $f" >&2; exit 1; }
done

# Every lib/*.c must be in the archive (Bazel names members x.o or x.pic.o).
if [ -d "$root/lib" ] && ls "$root"/lib/*.c >/dev/null 2>&1; then
	members=$(ar t "$archive" | sed -E 's/(\.pic)?\.o$//' | sort)
	for c in "$root"/lib/*.c; do
		n=$(basename "$c" .c)
		grep -qxF "$n" <<<"$members" || {
			echo "install.sh: $archive lacks lib/$n.c's object" >&2
			exit 1
		}
	done
fi

version=$(sed -n 's/^#define KVPOOL_VERSION[[:space:]]*"\(.*\)"$/\1/p' "$headers/kvpool.h")
[ -n "$version" ] || version=0.0.0

install -d "$prefix/include/kvpool" "$prefix/lib/pkgconfig"
install -m 0644 "$headers"/*.h "$prefix/include/kvpool/"
install -m 0644 "$archive" "$prefix/lib/libkvpool.a"
install -m 0755 "$shared" "$prefix/lib/libkvpool.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$here/kvpool.pc.in" \
	>"$prefix/lib/pkgconfig/kvpool.pc"
chmod 0644 "$prefix/lib/pkgconfig/kvpool.pc"
# The Python binding (python/README.md), beside the library it loads.
if [ -d "$root/python/kvpool" ]; then
	install -d "$prefix/lib/python3/dist-packages/kvpool"
	install -m 0644 "$root"/python/kvpool/*.py "$prefix/lib/python3/dist-packages/kvpool/"
fi
echo "installed kvpool $version into $prefix (PKG_CONFIG_PATH=$prefix/lib/pkgconfig," \
	"PYTHONPATH=$prefix/lib/python3/dist-packages)"
