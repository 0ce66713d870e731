#!/usr/bin/env bash
# tests/layers_test.sh - the include layering of the tree holds, and the check
# catches a violation.
#
# Runs tools/check_layers.sh on the repository this script really lives in
# (readlink -f follows Bazel's runfiles symlinks back to the source tree): it
# must pass.  Then plants four violations in a copy (a lower module including
# a higher one, the pool including the prefix cache it is a mode of, a test
# including a private header, the Python pool module importing storage) and
# checks that the script fails and names each.
set -euo pipefail
self=$(readlink -f "${BASH_SOURCE[0]}")
repo=$(cd "$(dirname "$self")/.." && pwd)

if ! out=$("$repo/tools/check_layers.sh" "$repo"); then
	echo "FAIL: the tree violates its layering:" >&2
	echo "$out" >&2
	exit 1
fi
echo "ok: $repo follows its layering"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tools" "$tmp/python"
cp -r "$repo/lib" "$repo/tests" "$tmp/"
cp -r "$repo/python/kvpool" "$tmp/python/"
cp "$repo/tools/check_layers.sh" "$tmp/tools/"
"$tmp/tools/check_layers.sh" "$tmp" >/dev/null || { echo "FAIL: the copy already fails" >&2; exit 1; }

# Plant: the pool (below storage) includes storage; a test includes pool internals.
sed -i '0,/#include "lib\/pool\//s//#include "lib\/storage\/storage_hazard.h"\n&/' "$tmp/lib/pool/pool.c"
sed -i '0,/#include "lib\/pool\//s//#include "lib\/prefix\/prefix_internal.h"\n&/' "$tmp/lib/pool/pool_alloc.c"
echo '#include "lib/pool/pool_internal.h"' >>"$tmp/tests/pool_api_test.c"
printf '\ndef _f():\n    from .storage import BlockStorage\n' >>"$tmp/python/kvpool/pool.py"
if out=$("$tmp/tools/check_layers.sh" "$tmp"); then
	echo "FAIL: planted violations passed the check" >&2
	exit 1
fi
echo "$out"
grep -q '^lib/pool/pool.c:[0-9]*: lib/pool includes lib/storage' <<<"$out" ||
	{ echo "FAIL: the pool -> storage include was not reported" >&2; exit 1; }
grep -q '^lib/pool/pool_alloc.c:[0-9]*: lib/pool includes lib/prefix' <<<"$out" ||
	{ echo "FAIL: the pool -> prefix include was not reported" >&2; exit 1; }
grep -q '^tests/pool_api_test.c:[0-9]*: includes a private header ("lib/pool/pool_internal.h")' <<<"$out" ||
	{ echo "FAIL: the test's private include was not reported" >&2; exit 1; }
grep -q '^python/kvpool/pool.py:[0-9]*: python kvpool.pool imports kvpool.storage' <<<"$out" ||
	{ echo "FAIL: the Python pool -> storage import was not reported" >&2; exit 1; }
echo "ok: all four planted violations reported"
