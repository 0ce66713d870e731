#!/usr/bin/env bash
# tests/style_test.sh - tools/check_style.sh catches each rule's violation,
# and the tree keeps the rules.
#
# Works on the repository this script really lives in (readlink -f follows
# Bazel's runfiles symlinks back to the source tree).  In order:
#   1. a minimal clean tree (an opaque public type defined in lib/, short
#      sentences, hex that is no commit) passes with an "ok" line;
#   2. a copy of the files the check reads gets one violation of each rule
#      (a #define KVP_FOO in a lib .c, a struct kvp_thing in a lib .h, a lib
#      file of 601 lines, a docs page and a header comment of 30-word
#      sentences, a commit hash from `git log` in docs/DESIGN.md): the check
#      fails, and what it prints beyond its output on the unplanted copy is
#      exactly those six reports (so the copy need not be clean);
#   3. the copy made a git work tree, a full 40-digit hash of its commit in a
#      doc is reported as resolving in git;
#   4. last, the tree itself must pass.
set -euo pipefail
self=$(readlink -f "${BASH_SOURCE[0]}")
repo=$(cd "$(dirname "$self")/.." && pwd)
check=tools/check_style.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
# run DIR: the check's output on DIR, its exit status in $rc.
run() {
	rc=0
	out=$("$1/$check" "$1") || rc=$?
}

# --- 1. a minimal clean tree passes ---------------------------------------------
mini=$tmp/mini
mkdir -p "$mini/tools" "$mini/include/kvpool" "$mini/lib/m" "$mini/docs"
cp "$repo/tools/check_style.sh" "$repo/tools/sentence_length.py" "$mini/tools/"
cat >"$mini/include/kvpool/t.h" <<'EOF'
/* The public type. It is opaque. */
typedef struct kvp_t kvp_t;
#define KVP_T_MAX 4
EOF
cat >"$mini/lib/m/m.h" <<'EOF'
/* Internal names. They take kvpi_. */
#define KVPI_M 1
struct kvpi_m { int x; };
EOF
cat >"$mini/lib/m/m.c" <<'EOF'
#include "lib/m/m.h"
/* The public type is defined here. */
struct kvp_t { int x[KVP_T_MAX]; };
typedef struct kvp_t kvp_t;
EOF
cat >"$mini/docs/A.md" <<'EOF'
# A page

Short sentences pass. Hex that names no commit passes too.

| key | 0x1a2b3c4d5e | c3b7d8146f95eab9 | deadbeef | 1234567 |
EOF
echo "Read docs/A.md. It is short." >"$mini/README.md"
run "$mini"
[ "$rc" = 0 ] || fail "the minimal clean tree failed the check (exit $rc):"$'\n'"$out"
grep -q '^ok: ' <<<"$out" || fail "no ok line on the clean tree: $out"
echo "ok: a clean tree passes: $out"

# --- 2. one planted violation of each rule ----------------------------------------
# Only what the check reads: C sources, lib/, the public headers, the docs' .md.
copy=$tmp/copy
mkdir -p "$copy"
(cd "$repo" && {
	find lib include -type f -print0
	find bench stress tests tools python docs/examples -type f \( -name '*.c' -o -name '*.h' \
		-o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \) -print0 2>/dev/null
	find docs -type f -name '*.md' -print0
	printf '%s\0' README.md tools/check_style.sh tools/sentence_length.py
} | tar --null -T - -cf -) | tar -xf - -C "$copy"
run "$copy"
before=$out
[ "$rc" -le 1 ] || fail "the check broke on the copy (exit $rc): $out"

# A commit of the real history that mixes digits and letters.
hash=$(git -C "$repo" log --format=%h -n 200 2>/dev/null | grep '[0-9]' | grep -m1 '[a-f]' || true)
[ -n "$hash" ] || fail "no commit hash from git log in $repo"

n=$(wc -l <"$copy/lib/base/status.c")
echo '#define KVP_FOO 1' >>"$copy/lib/base/status.c"
l_define="lib/base/status.c:$((n + 1)): #define KVP_FOO: a KVP_ macro outside include/kvpool/"
n=$(wc -l <"$copy/lib/base/spin.h")
echo 'struct kvp_thing {int x;};' >>"$copy/lib/base/spin.h"
l_struct="lib/base/spin.h:$((n + 1)): struct kvp_thing: defines a kvp_ tag include/kvpool/ does not declare"
for i in $(seq 601); do echo "int kvpi_long_$i;"; done >"$copy/lib/base/long_file.c"
for i in $(seq 600); do echo "int kvpi_edge_$i;"; done >"$copy/lib/base/edge_file.c" # at the limit: passes
l_long="lib/base/long_file.c:601: 601 lines; a file in lib/ has at most 600"
s30="This sentence keeps going on and on with words that add nothing to what it means, so that a reader who starts it loses the thread long before the end of it."
{
	echo "# Long"
	echo
	echo "$s30 $s30 $s30"
	echo
	echo "| 0x1a2b3c4d5e | c3b7d8146f95eab9 | deadbeef | 1234567 |" # not commits
} >"$copy/docs/LONG.md"
l_md="docs/LONG.md:1: mean sentence length 3[0-9].[0-9] words over 3 sentences; docs and headers keep it under 25"
printf '/*\n * %s %s\n */\n#define KVPI_WORDY 1\n' "$s30" "$s30" >"$copy/lib/base/wordy.h"
l_h="lib/base/wordy.h:1: mean sentence length 3[0-9].[0-9] words over 2 sentences; docs and headers keep it under 25"
# In a table row: rule c does not read tables, so DESIGN.md's mean stays.
n=$(wc -l <"$copy/docs/DESIGN.md")
printf '\n| built at | %s |\n' "$hash" >>"$copy/docs/DESIGN.md"
l_hash="docs/DESIGN.md:$((n + 2)): commit hash $hash; only docs/BENCHMARKS.md and docs/STRESS.md name commits"

run "$copy"
[ "$rc" = 1 ] || fail "planted violations passed the check (exit $rc)"
new=$(comm -13 <(grep -Ev '^(ok: )?check_style: ' <<<"$before" | sort) <(grep -Ev '^(ok: )?check_style: ' <<<"$out" | sort))
gone=$(comm -23 <(grep -Ev '^(ok: )?check_style: ' <<<"$before" | sort) <(grep -Ev '^(ok: )?check_style: ' <<<"$out" | sort))
echo "$new"
[ -z "$gone" ] || fail "planting made reports vanish or change:"$'\n'"$gone"
for want in l_define l_struct l_long l_md l_h l_hash; do
	grep -q "^${!want}" <<<"$new" || fail "not reported: ${!want}"
done
[ "$(wc -l <<<"$new")" = 6 ] || fail "expected exactly 6 new reports, got:"$'\n'"$new"
echo "ok: all six planted violations reported, and nothing else"

# --- 3. a full hash resolving in git ----------------------------------------------
before=$out
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git -C "$copy" init -q
git -C "$copy" -c user.name=style_test -c user.email=style_test@localhost \
	commit -q --allow-empty -m 'style_test'
full=$(git -C "$copy" rev-parse HEAD)
n=$(wc -l <"$copy/docs/REMOTE.md")
printf '\n| built at | %s |\n' "$full" >>"$copy/docs/REMOTE.md"
run "$copy"
new=$(comm -13 <(grep -Ev '^(ok: )?check_style: ' <<<"$before" | sort) <(grep -Ev '^(ok: )?check_style: ' <<<"$out" | sort))
[ "$new" = "docs/REMOTE.md:$((n + 2)): commit hash $full (resolves in git); only docs/BENCHMARKS.md and docs/STRESS.md name commits" ] ||
	fail "the full hash was not reported alone; new reports:"$'\n'"$new"
echo "ok: a full commit hash is reported when git resolves it"

# --- 4. the tree keeps the rules ---------------------------------------------------
run "$repo"
if [ "$rc" != 0 ]; then
	echo "FAIL: the tree breaks the style rules:" >&2
	echo "$out" >&2
	exit 1
fi
echo "$out"
