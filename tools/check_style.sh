#!/usr/bin/env bash
# tools/check_style.sh - fail when the tree breaks one of the house rules a
# script can check (docs/STYLE.md states them in prose).
#
#   tools/check_style.sh [ROOT]     ROOT defaults to the repository
#
# Prints each violation as FILE:LINE: reason, then a count, and exits 1 if
# there was any; prints one "ok" line and exits 0 otherwise.  The rules:
#
# a. Public prefixes are for public names.  Outside include/kvpool/ (in lib/,
#    bench/, stress/, tests/, tools/, python/, docs/examples/: files ending
#    .c .h .cc .cpp .hpp) there is no `#define KVP_...`, no definition or
#    forward declaration of a `struct`, `union` or `enum` tag `kvp_...`, and
#    no `typedef ... kvp_...;`, unless include/kvpool/ declares that tag or
#    typedef name (the opaque public types are declared there and defined in
#    lib/).  Public names may be used anywhere.  Internal names take kvpi_ /
#    KVPI_.  Comments and string literals are not read.
# b. No file under lib/ is over 600 lines (wc -l).
# c. docs/*.md, include/kvpool/*.h and every lib/**/*.h keep a mean sentence
#    length under 25 words, as tools/sentence_length.py measures it (a .md's
#    prose, a header's comments).
# d. Docs name no commits, except docs/BENCHMARKS.md and docs/STRESS.md, which
#    record the tree each measurement ran on.  In docs/**/*.md and README.md,
#    a token is a word of 7 to 40 lowercase hex digits (no letter, digit or _
#    on either side, so 0x... constants are not tokens) with at least one
#    digit and at least one letter a-f.  A token is a commit hash when
#      - it is 7 to 12 characters long (the abbreviated hashes people paste;
#        this also catches hashes of commits rebased away, which no longer
#        resolve), or
#      - ROOT is the top of a git work tree and `TOKEN^{commit}` resolves
#        there (full hashes; a Bazel sandbox copy without .git skips this).
#    On the tree this rule was written for, every token of 7 to 12 characters
#    was a commit hash; the other hex there (16-digit prefix keys, written
#    0x...) is longer or prefixed, so neither clause matches it.
set -uo pipefail
here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
root=${1:-$(cd "$here/.." && pwd)}
cd "$root" || exit 2

MAX_LIB_LINES=600
MAX_SENTENCE=25
HASH_DOCS_ALLOWED="docs/BENCHMARKS.md docs/STRESS.md"
HASH_DOCS_SAY="docs/BENCHMARKS.md and docs/STRESS.md"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
report() {
	echo "$1: $2" >>"$out"
}

# --- a. public prefixes ------------------------------------------------------
c_dirs=()
for d in lib bench stress tests tools python docs/examples replay; do
	[ -d "$d" ] && c_dirs+=("$d")
done
# The scanner (Python: it blanks comments and strings, and follows a typedef
# to its semicolon across lines); file names come as arguments.
scan_c=$(cat <<'PY'
import glob, re, sys

def strip(src):
    """Comments and string/char literals blanked, newlines kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif c in '"\'':
            j = i + 1
            while j < n and src[j] != c and src[j] != '\n':
                j += 2 if src[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r'[^\n]', ' ', src[i + 1:j - 1]) + c if j - i >= 2 else src[i:j]); i = j
        else:
            out.append(c); i += 1
    return ''.join(out)

def unbrace(s):
    """s with every {...} group removed (innermost first)."""
    while True:
        t = re.sub(r'\{[^{}]*\}', ' ', s)
        if t == s:
            return s
        s = t

def typedefs(text):
    """(name, offset) for each name a typedef declares."""
    for m in re.finditer(r'\btypedef\b', text):
        i, depth = m.end(), 0
        while i < len(text):
            ch = text[i]
            if ch == '{': depth += 1
            elif ch == '}': depth -= 1
            elif ch == ';' and depth <= 0: break
            i += 1
        seg = text[m.end():i]
        body = unbrace(seg)
        body = re.sub(r'__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)', ' ', body)
        names = re.findall(r'\(\s*\*\s*([A-Za-z_]\w*)\s*\)', body)
        if not names:
            parts, cur, pd = [], '', 0
            for ch in body:
                if ch == '(': pd += 1
                elif ch == ')': pd -= 1
                if ch == ',' and pd == 0:
                    parts.append(cur); cur = ''
                else:
                    cur += ch
            parts.append(cur)
            for p in parts:
                p = p.strip()
                while True:   # trailing [N] and (params) of array and function types
                    q = re.sub(r'(\[[^\[\]]*\]|\((?:[^()]|\([^()]*\))*\))\s*$', '', p).strip()
                    if q == p: break
                    p = q
                ids = re.findall(r'[A-Za-z_]\w*', p)
                if ids:
                    names.append(ids[-1])
        for nm in names:
            k = seg.rfind(nm)
            yield nm, m.end() + (k if k >= 0 else 0)

TAG = re.compile(r'\b(struct|union|enum)\s+(kvp_\w+)')
pub_tags, pub_types = set(), set()
for h in sorted(glob.glob('include/kvpool/**/*.h', recursive=True)):
    t = strip(open(h, encoding='utf-8', errors='replace').read())
    pub_tags.update(TAG.findall(t))
    pub_types.update(nm for nm, _ in typedefs(t))

found = []
for f in sys.argv[1:]:
    t = strip(open(f, encoding='utf-8', errors='replace').read())
    line = lambda off: t.count('\n', 0, off) + 1
    for m in re.finditer(r'^[ \t]*#[ \t]*define[ \t]+(KVP_\w*)', t, re.M):
        found.append((f, line(m.start(1)), f'#define {m.group(1)}: a KVP_ macro outside include/kvpool/ (internal macros take KVPI_)'))
    for m in re.finditer(r'\b(struct|union|enum)\s+(kvp_\w+)\s*([{;])', t):
        if (m.group(1), m.group(2)) in pub_tags:
            continue
        what = 'defines' if m.group(3) == '{' else 'declares'
        found.append((f, line(m.start(2)), f'{m.group(1)} {m.group(2)}: {what} a kvp_ tag include/kvpool/ does not declare (internal tags take kvpi_)'))
    for nm, off in typedefs(t):
        if nm.startswith('kvp_') and nm not in pub_types:
            found.append((f, line(off), f'typedef {nm}: a kvp_ typedef include/kvpool/ does not declare (internal names take kvpi_)'))
for f, ln, why in sorted(found):
    print(f'{f}:{ln}: {why}')
PY
)
c_files=()
if [ ${#c_dirs[@]} -gt 0 ]; then
	while IFS= read -r -d '' f; do c_files+=("$f"); done < <(find "${c_dirs[@]}" -type f \
		\( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \) -print0 | sort -z)
fi
if [ ${#c_files[@]} -gt 0 ] && ! python3 -c "$scan_c" "${c_files[@]}" >>"$out"; then
	report "tools/check_style.sh" "the C scanner failed; rule a not checked"
fi

# --- b. lib/ file length -----------------------------------------------------
n_lib=0
if [ -d lib ]; then
	while IFS= read -r -d '' f; do
		n_lib=$((n_lib + 1))
		n=$(wc -l <"$f")
		[ "$n" -gt "$MAX_LIB_LINES" ] &&
			report "$f:$((MAX_LIB_LINES + 1))" "$n lines; a file in lib/ has at most $MAX_LIB_LINES (split it)"
	done < <(find lib -type f -print0 | sort -z)
fi

# --- c. sentence length of docs and headers ----------------------------------
prose=()
while IFS= read -r -d '' f; do prose+=("$f"); done < <(
	{ find docs -maxdepth 1 -type f -name '*.md' -print0 2>/dev/null
	  find include/kvpool -type f -name '*.h' -print0 2>/dev/null
	  find lib -type f -name '*.h' -print0 2>/dev/null; } | sort -z)
if [ ${#prose[@]} -gt 0 ]; then
	if ! lens=$(python3 "$here/sentence_length.py" "${prose[@]}"); then
		report "tools/sentence_length.py" "failed; sentence lengths not checked"
	fi
	while read -r mean count f; do
		[ -n "$f" ] || continue
		awk -v m="$mean" -v max="$MAX_SENTENCE" 'BEGIN { exit !(m >= max) }' &&
			report "$f:1" "mean sentence length $mean words over $count sentences; docs and headers keep it under $MAX_SENTENCE"
	done <<<"$lens"
fi

# --- d. commit hashes in docs ------------------------------------------------
git_ok=0
top=$(git -C "$root" rev-parse --show-toplevel 2>/dev/null) &&
	[ "$(readlink -f "$top")" = "$(readlink -f "$root")" ] && git_ok=1
docs=()
while IFS= read -r -d '' f; do
	case " $HASH_DOCS_ALLOWED " in *" $f "*) continue ;; esac
	docs+=("$f")
done < <({ find docs -type f -name '*.md' -print0 2>/dev/null
	   [ -f README.md ] && printf 'README.md\0'; } | sort -z)
if [ ${#docs[@]} -gt 0 ]; then
	# FILE:LINE:TOKEN for every hex word with a digit and a letter.
	toks=$(grep -HnoP '(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])' "${docs[@]}" |
		awk -F: '$3 ~ /[0-9]/ && $3 ~ /[a-f]/')
	if [ -n "$toks" ]; then
		declare -A commit=()
		if [ "$git_ok" = 1 ]; then
			# One line per token longer than 12: "SHA commit SIZE" if it
			# names a commit, else "TOKEN^{commit} missing" (or ambiguous).
			mapfile -t uniq < <(cut -d: -f3 <<<"$toks" | awk 'length($0) > 12' | sort -u)
			res=()
			[ ${#uniq[@]} -gt 0 ] && mapfile -t res < <(printf '%s^{commit}\n' "${uniq[@]}" |
				git -C "$root" cat-file --batch-check 2>/dev/null)
			for i in "${!uniq[@]}"; do
				case "${res[$i]:-}" in
				*" commit "*) commit[${uniq[$i]}]=1 ;;
				esac
			done
		fi
		while IFS=: read -r f ln tok; do
			if [ ${#tok} -le 12 ]; then
				report "$f:$ln" "commit hash $tok; only $HASH_DOCS_SAY name commits"
			elif [ -n "${commit[$tok]+x}" ]; then
				report "$f:$ln" "commit hash $tok (resolves in git); only $HASH_DOCS_SAY name commits"
			fi
		done <<<"$toks"
	fi
fi

if [ -s "$out" ]; then
	cat "$out"
	n=$(wc -l <"$out")
	echo "check_style: $n violation$([ "$n" = 1 ] || echo s)"
	exit 1
fi
echo "ok: check_style: ${#c_files[@]} C files, $n_lib lib/ files, ${#prose[@]} docs and headers, ${#docs[@]} docs: no violation"
exit 0
