#!/usr/bin/env bash
# tools/install.sh - build kvpool (plain -O2 config) and install it.
#
#   tools/install.sh --prefix DIR [--rpath] [--python PYTHON] [--no-python]
#
# installs
#   DIR/include/kvpool/*.h                      the public headers
#   DIR/lib/libkvpool.so.X.Y.Z                  //tools:libkvpool.so (SONAME libkvpool.so.0,
#   DIR/lib/libkvpool.so.0 -> libkvpool.so.X.Y.Z   exports the public API only, KVPOOL_0)
#   DIR/lib/libkvpool.so   -> libkvpool.so.0
#   DIR/lib/libkvpool.a                         every object of //:kvpool
#   DIR/lib/pkgconfig/kvpool.pc                 from tools/kvpool.pc.in
#   DIR/lib/cmake/kvpool/kvpoolConfig*.cmake    from cmake/*.in: imported target kvpool::kvpool
#   DIR/share/man/man3/*.3                      kvpool(3); a page per public function, struct,
#                                               enum and header (kernel-doc, comments)
#   DIR/share/doc/kvpool/                       README.md, LICENSE, CHANGELOG.md, docs/
#   PURELIB/kvpool/*.py                         the Python package (python/README.md)
# where PURELIB is where PYTHON (default: python3 on PATH) looks for packages
# under DIR: its own site directory when that lies inside DIR (DIR=/usr/local
# with Debian's python3, or a virtual environment), otherwise
# DIR/lib/pythonX.Y/site-packages (then set PYTHONPATH; the script says so).
#
# Linking, once installed:
#   cc app.c $(pkg-config --cflags --libs kvpool)      (PKG_CONFIG_PATH=DIR/lib/pkgconfig)
#   find_package(kvpool REQUIRED) + target_link_libraries(app kvpool::kvpool)
#                                                      (CMAKE_PREFIX_PATH=DIR)
# A program finds libkvpool.so.0 at run time through the system's loader
# (ldconfig after installing into a system directory, or LD_LIBRARY_PATH);
# with --rpath the .pc also puts DIR/lib in the program's rpath (CMake adds
# one to build trees by itself).
#
# Already-built files can be given instead of building (the install test does):
#   tools/install.sh --prefix DIR --archive libkvpool.a --shared libkvpool.so --headers DIR
set -euo pipefail

usage() {
	cat <<'EOF'
usage: tools/install.sh --prefix DIR [options]

  --prefix DIR       install under DIR (required)
  --rpath            put DIR/lib in the rpath of programs linked with pkg-config
                     (default: no rpath; use ldconfig or LD_LIBRARY_PATH)
  --python PYTHON    the interpreter whose package directory gets kvpool/ (default: python3)
  --no-python        do not install the Python package
  --archive FILE.a --shared FILE.so --headers DIR
                     install these already-built files instead of building
  -h, --help         this text
EOF
}
die_usage() {
	echo "install.sh: $*; see --help" >&2
	exit 2
}

prefix= archive= shared= headers= rpath=0 python=python3 with_python=1
while [ $# -gt 0 ]; do
	case "$1" in
	--prefix | --archive | --shared | --headers | --python)
		[ $# -ge 2 ] || die_usage "$1 needs a value"
		declare "${1#--}=$2"
		shift 2
		;;
	--prefix=* | --archive=* | --shared=* | --headers=* | --python=*)
		v=${1#--}
		declare "${v%%=*}=${v#*=}"
		shift
		;;
	--rpath) rpath=1 && shift ;;
	--no-python) with_python=0 && shift ;;
	-h | --help) usage && exit 0 ;;
	*) die_usage "unknown option '$1'" ;;
	esac
done
[ -n "$prefix" ] || die_usage "--prefix DIR is required"

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
	die_usage "--archive, --shared and --headers go together"
fi
for f in "$archive" "$shared" "$headers"/kvpool.h "$headers"/version.h; do
	[ -e "$f" ] || { echo "install.sh: missing $f" >&2; exit 1; }
done

# Every lib/**/*.c must be in the archive (Bazel names members x.o or x.pic.o).
if [ -d "$root/lib" ] && [ -n "$(find "$root/lib" -name '*.c' -print -quit)" ]; then
	members=$(ar t "$archive" | sed -E 's/(\.pic)?\.o$//' | sort)
	for c in $(find "$root/lib" -name '*.c' | sort); do
		n=$(basename "$c" .c)
		grep -qxF "$n" <<<"$members" || {
			echo "install.sh: $archive lacks ${c#"$root"/}'s object" >&2
			exit 1
		}
	done
fi
soname=$(objdump -p "$shared" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = libkvpool.so.0 ] || {
	echo "install.sh: $shared has SONAME '$soname', not libkvpool.so.0" >&2
	exit 1
}

version=$(sed -n 's/^#define KVP_VERSION[[:space:]]*"\(.*\)"$/\1/p' "$headers/version.h")
[ -n "$version" ] || { echo "install.sh: no KVP_VERSION in $headers/version.h" >&2; exit 1; }

lib=$prefix/lib
install -d "$prefix/include/kvpool" "$lib/pkgconfig" "$lib/cmake/kvpool" \
	"$prefix/share/man/man3" "$prefix/share/doc/kvpool"
install -m 0644 "$headers"/*.h "$prefix/include/kvpool/"
install -m 0644 "$archive" "$lib/libkvpool.a"
rm -f "$lib/libkvpool.so" "$lib/libkvpool.so.0"
install -m 0755 "$shared" "$lib/libkvpool.so.$version"
ln -s "libkvpool.so.$version" "$lib/libkvpool.so.0"
ln -s libkvpool.so.0 "$lib/libkvpool.so"

rpath_flag=
[ "$rpath" = 1 ] && rpath_flag="-Wl,-rpath,\${libdir} "
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" -e "s|@RPATH@|$rpath_flag|g" -e "s|@HIREDIS@|-lhiredis |g" \
	"$here/kvpool.pc.in" >"$lib/pkgconfig/kvpool.pc"
chmod 0644 "$lib/pkgconfig/kvpool.pc"
for f in kvpoolConfig kvpoolConfigVersion; do
	sed -e "s|@VERSION@|$version|g" -e "s|@HIREDIS_LINK@|hiredis;|g" "$root/cmake/$f.cmake.in" >"$lib/cmake/kvpool/$f.cmake"
	chmod 0644 "$lib/cmake/kvpool/$f.cmake"
done

# Man pages from the installed headers' kernel-doc comments.
python3 "$here/kvpool_headers.py" man --quiet --out "$prefix/share/man/man3" \
	"$prefix"/include/kvpool/*.h
for f in README.md LICENSE CHANGELOG.md; do
	[ -f "$root/$f" ] && install -m 0644 "$root/$f" "$prefix/share/doc/kvpool/"
done
# docs/ as the README and the headers name it: share/doc/kvpool/docs/PREFIX.md, ...
# (the same files as CMakeLists.txt's install of docs/).
if [ -d "$root/docs" ]; then
	for pat in '*.md' 'img/*.png' 'grafana/*.json' 'prometheus/*.yml'; do
		for f in "$root"/docs/$pat; do
			[ -f "$f" ] || continue
			d=$prefix/share/doc/kvpool/docs/$(dirname "${f#"$root"/docs/}")
			install -d "$d"
			install -m 0644 "$f" "$d/"
		done
	done
fi

pypath=
if [ "$with_python" = 1 ] && [ -d "$root/python/kvpool" ]; then
	# Where $python looks under $prefix: one of its site directories inside the
	# prefix, else the prefix scheme's purelib (DIR/lib/pythonX.Y/site-packages).
	purelib=$("$python" - "$prefix" <<'EOF'
import site, sys, sysconfig
prefix = sys.argv[1].rstrip("/") + "/"
dirs = list(getattr(site, "getsitepackages", lambda: [])()) + [sysconfig.get_path("purelib")]
inside = [d for d in dirs if d.startswith(prefix)]
if inside:
    print(inside[0])
else:
    print(sysconfig.get_path("purelib", "posix_prefix",
                             vars={"base": prefix.rstrip("/"), "platbase": prefix.rstrip("/")}))
EOF
	) || { echo "install.sh: $python cannot say where its packages go" >&2; exit 1; }
	install -d "$purelib/kvpool"
	install -m 0644 "$root"/python/kvpool/*.py "$purelib/kvpool/"
	if ! "$python" -c 'import sys; sys.exit(0 if sys.argv[1] in sys.path else 1)' "$purelib"; then
		pypath=" PYTHONPATH=$purelib"
	fi
fi
echo "installed kvpool $version into $prefix (PKG_CONFIG_PATH=$lib/pkgconfig" \
	"CMAKE_PREFIX_PATH=$prefix MANPATH=$prefix/share/man$pypath)"
