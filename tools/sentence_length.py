#!/usr/bin/env python3
"""tools/sentence_length.py - mean sentence length, in words, of prose files.

    tools/sentence_length.py FILE...   prints "MEAN SENTENCES FILE" per file

A Markdown file's prose is its text outside code fences, indented code,
tables and headings.  A C file's prose is the text of its comments.  A
sentence ends at '.', '!' or '?' before a space and a capital, a digit, a
quote or an opening bracket; a paragraph break and a list item also end
one.  Inline code counts as one word; "e.g.", "i.e.", "etc.", "vs." and
"cf." end nothing.  tools/check_style.sh holds docs and headers to a mean
under 25 words.
"""
import re, sys

ABBR = re.compile(r'\b(e\.g|i\.e|etc|vs|cf|approx|no)\.', re.I)

def md_text(src):
    out, fence = [], False
    for line in src.splitlines():
        s = line.strip()
        if s.startswith('```'):
            fence = not fence; out.append(''); continue
        if fence or s.startswith('|') or s.startswith('#') or line.startswith('    '):
            out.append(''); continue
        out.append(line)
    return '\n'.join(out)

def c_text(src):
    parts = []
    for m in re.finditer(r'/\*(.*?)\*/|//([^\n]*)', src, re.S):
        body = m.group(1) if m.group(1) is not None else m.group(2)
        lines = [re.sub(r'^\s*\*+ ?', '', l) for l in body.splitlines()]
        parts.append('\n'.join(lines))
    return '\n\n'.join(parts)

def sentences(text):
    text = re.sub(r'`[^`\n]*`', 'CODE', text)       # inline code is one word
    text = ABBR.sub(lambda m: m.group(1), text)
    out = []
    for para in re.split(r'\n\s*\n|\n\s*(?:[-*+]|\d+[.)])\s+', text):
        para = ' '.join(para.split())
        for s in re.split(r'(?<=[.!?])\s+(?=[A-Z`(*"\'0-9])|(?<=[.!?])$', para):
            w = re.findall(r'[A-Za-z0-9_][\w\'./-]*', s)
            if w:
                out.append(len(w))
    return out

def mean(path):
    src = open(path, encoding='utf-8', errors='replace').read()
    t = md_text(src) if path.endswith('.md') else c_text(src)
    s = sentences(t)
    return (sum(s) / len(s) if s else 0.0), len(s)

if __name__ == '__main__':
    for p in sys.argv[1:]:
        m, n = mean(p)
        print(f'{m:6.1f} {n:5d} {p}')
