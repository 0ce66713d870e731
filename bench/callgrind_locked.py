#!/usr/bin/env python3
"""bench/callgrind_locked.py CG DIS - instructions and locked instructions in a callgrind file.

CG is a callgrind output made with --dump-instr=yes (and usually
--toggle-collect), DIS the program's `objdump -d --no-show-raw-insn`.
Prints "TOTAL LOCKED": every instruction counted, and those of them that
carry a lock prefix or are an xchg with memory (locked on x86), counted
only in the program's own code (a call's inclusive cost is skipped).
The callgrind scripts beside it (callgrind_pair.sh, callgrind_lifecycle.sh)
divide both by the pairs or blocks they ran.
"""
import re
import sys


def locked_addresses(dis):
    locks = set()
    for line in open(dis):
        m = re.match(r'^\s+([0-9a-f]+):\s+(lock |xchg\s+(\S+))', line)
        # xchg %ax,%ax is the two-byte nop the assembler pads with: not locked.
        if m and not (m.group(3) and m.group(3) == '%ax,%ax'):
            locks.add(int(m.group(1), 16))
    return locks


def count(cg, locks):
    total = locked = cur = 0
    skip = False
    for line in open(cg):
        line = line.rstrip('\n')
        if line.startswith('summary:'):
            total = int(line.split()[1])
        if line.startswith('calls='):
            skip = True  # the next cost line is a call's inclusive cost
            continue
        m = re.match(r'^(0x[0-9a-f]+|\+\d+|-\d+|\*)\s+\S+\s+(\d+)$', line)
        if not m:
            continue
        pos, c = m.group(1), int(m.group(2))
        if pos.startswith('0x'):
            cur = int(pos, 16)
        elif pos[0] == '+':
            cur += int(pos[1:])
        elif pos[0] == '-':
            cur -= int(pos[1:])
        if skip:
            skip = False
            continue
        if cur in locks:
            locked += c
    return total, locked


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit('usage: callgrind_locked.py CG DIS')
    print(*count(sys.argv[1], locked_addresses(sys.argv[2])))
