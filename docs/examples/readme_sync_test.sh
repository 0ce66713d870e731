#!/usr/bin/env bash
# README.md's C example must be docs/examples/threads.c, byte for byte, so the
# example a reader copies is the one //docs/examples:threads_example runs.
set -euo pipefail
readme=README.md
example=docs/examples/threads.c
got=$(awk '/^```c$/{on=1; next} /^```$/{if (on) exit} on' "$readme")
if [ "$got" != "$(cat "$example")" ]; then
	echo "README.md's \`\`\`c block differs from $example:" >&2
	diff <(printf '%s\n' "$got") "$example" >&2 || true
	exit 1
fi
echo "README example matches $example"
