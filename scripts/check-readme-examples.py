#!/usr/bin/env python3
"""Checks that every README code block marked `<!-- checked: PATH -->` (on the line
before its opening fence) appears verbatim, as consecutive lines, in PATH — a file that
scripts/test.sh compiles and runs (a demo program, an example, a Go Example function).
Indentation is compared after removing what the lines have in common, so a README block
may show the body of a function without its indentation. So the README's examples
cannot rot: change one and this fails until the file it comes from says the same.
"""

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = re.compile(r"<!-- checked: (\S+) -->")


def blocks(readme: str):
    lines = readme.splitlines()
    for i, line in enumerate(lines):
        m = MARK.search(line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            yield m.group(1), i + 1, None
            continue
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        yield m.group(1), i + 1, None if end is None else lines[i + 2 : end]


def found_in(block, source_lines) -> bool:
    want = textwrap.dedent("\n".join(block)).strip("\n")
    n = len(block)
    for start in range(len(source_lines) - n + 1):
        window = textwrap.dedent("\n".join(source_lines[start : start + n])).strip("\n")
        if window == want:
            return True
    return False


def main() -> int:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    failures, count = [], 0
    for path, line, block in blocks(readme):
        if block is None:
            failures.append(f"README.md:{line}: `checked: {path}` is not followed by a code block")
            continue
        count += 1
        source = ROOT / path
        if not source.is_file():
            failures.append(f"README.md:{line}: {path} does not exist")
        elif not found_in(block, source.read_text(encoding="utf-8").splitlines()):
            failures.append(
                f"README.md:{line}: the example is not, line for line, in {path}; "
                "change both together"
            )
    if count == 0:
        failures.append("README.md has no `<!-- checked: PATH -->` examples")
    for f in failures:
        print(f, file=sys.stderr)
    if not failures:
        print(f"README examples: {count} blocks found verbatim in the files scripts/test.sh runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
