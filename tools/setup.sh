#!/usr/bin/env bash
# tools/setup.sh - install the Debian 12 packages kvpool needs, if missing.
#
# Idempotent and silent when everything is installed (one dpkg-query call).
# Otherwise runs `apt-get update` once and installs only the missing packages,
# non-interactively; as root, or through sudo when not root.
#
# Everything the project needs from Debian goes into PACKAGES below (one per
# line, a comment saying who needs it).
#
#   tools/setup.sh             everything: Bazel, clang, the benchmarks' peers, ...
#   tools/setup.sh --minimal   only what the CMake build of the library needs
#                              (CMakeLists.txt): MINIMAL below
set -euo pipefail

# The CMake build of the library: a C compiler, cmake, pkg-config, liburcu,
# OpenSSL's libcrypto and hiredis (the remote tier; without it CMake leaves
# the tier out and its calls answer KVP_ENOTSUP).  libkvpool.so needs nothing
# else at run time (liburcu-bp, libcrypto, libhiredis, libm, libc).
MINIMAL="
build-essential
cmake
pkg-config
liburcu-dev
libssl-dev
libhiredis-dev
"

PACKAGES="
bazel-bootstrap         # Bazel 4.2.3: the build
bazel-platforms         # @platforms for offline Bazel (WORKSPACE)
build-essential         # cc, make, ar: tools/install.sh and its test
pkg-config              # kvpool.pc users and the install test
clang                   # the compiler of every Bazel config
libclang-rt-14-dev      # ASan/UBSan/TSan runtimes for clang 14
llvm                    # llvm-symbolizer: symbolised sanitizer reports
lld                     # the linker of --config=asan (.bazelrc)
clang-format            # .clang-format style
liburcu-dev             # RCU: segment directory, owner table (liburcu 0.13)
libcmocka-dev           # C unit tests
libmicrohttpd-dev       # metrics endpoint for Prometheus
prometheus              # promtool check metrics; server for the scrape test
curl                    # the Prometheus scrape test queries the HTTP APIs
valgrind                # leak checks of kvp_pool_destroy
python3                 # Python binding and its tests
python3-pytest
python3-numpy
libpython3.11-dev       # Python.h + libpython3.11: //python:pyembed, the sanitizer runs of the Python tests
python3-matplotlib      # benchmark figures
libjemalloc-dev         # benchmark baselines
libmimalloc-dev
libgoogle-perftools-dev
libdpdk-dev
libssl-dev              # libcrypto SHA-256: kvp_prefix_hash
libjansson-dev          # JSON: trace parsing, dumps, dashboards in tests
libhiredis-dev          # the remote prefix tier's Redis client
redis-server            # a real Redis for the remote tier's tests
cmake                   # the installed CMake package's test project
python3-venv            # the pip-install test (a fresh venv)
python3-setuptools      # python/pyproject.toml builds offline
python3-pip             # pip install --no-build-isolation ./python
man-db                  # man -l on the generated man pages
groff-base
tree                    # tree lib: the module layout at a glance (lib/README.md)
"

case "${1:-}" in
"") ;;
--minimal) PACKAGES=$MINIMAL ;;
-h | --help)
	sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "setup: unknown option '$1' (--minimal, --help)" >&2
	exit 2
	;;
esac

# Strip comments and blank lines: one package name per word.
want=$(sed -e 's/#.*//' <<<"$PACKAGES" | tr -s ' \t\n' '\n' | sed '/^$/d')

# One dpkg-query call: it prints "name status" for every package it knows
# (and complains on stderr about the ones it has never heard of).
installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' $want 2>/dev/null |
	awk '$2 == "installed" { print $1 }' || true)
missing=$(for p in $want; do grep -qxF "$p" <<<"$installed" || echo "$p"; done)
[ -z "$missing" ] && exit 0

missing=$(echo $missing)
echo "setup: installing missing Debian packages: $missing" >&2
SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null; then
		SUDO="sudo"
	else
		echo "setup: not root and no sudo; install as root: apt-get install $missing" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
# shellcheck disable=SC2086 # word splitting of the package list is intended
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	$missing >/dev/null
echo "setup: done" >&2
