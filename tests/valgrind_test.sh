#!/usr/bin/env bash
# Runs each test program given as an argument under valgrind's memcheck:
# any invalid access, use of uninitialised memory, or block definitely or
# indirectly lost at exit fails the test.  ("Possibly lost" is left out: the
# one such block is the TLS of liburcu's call_rcu thread, alive at exit.)
set -euo pipefail
command -v valgrind >/dev/null || { echo "valgrind is missing (tools/setup.sh installs it)" >&2; exit 1; }
for prog in "$@"; do
	echo "== valgrind $prog"
	valgrind --quiet --error-exitcode=9 --leak-check=full \
		--errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
		"$prog" >/dev/null
	echo "   clean"
done
