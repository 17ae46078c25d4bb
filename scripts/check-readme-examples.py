#!/usr/bin/env python3
"""Checks that every code block of README.md and docs/*.md marked `<!-- checked: PATH -->` (on the line
before its opening fence) appears verbatim, as consecutive lines, in PATH — a file that
scripts/test.sh compiles and runs (a demo program, an example, a Go Example function).
Indentation is compared after removing what the lines have in common, so a README block
may show the body of a function without its indentation. So the examples cannot rot:
change one and this fails until the file it comes from says the same. README.md must
mark one example of each language the tests run (rust, c, go, python); a code block of
one of those languages that is not marked fails the check, naming it (UNCHECKED_ALLOWED
would list pages exempt from that; there are none). Examples that no other test runs
live in core/tests/docs_examples.rs, pypanto/tests/test_docs_examples.py, Go Example
functions and C tests.
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


RUN_LANGS = ("rust", "c", "go", "python")
# Pages that may still show code of a RUN_LANGS language that no test runs (none).
UNCHECKED_ALLOWED: set = set()


def pages():
    yield "README.md"
    for page in sorted((ROOT / "docs").glob("*.md")):
        yield page.relative_to(ROOT).as_posix()


def unmarked(text: str):
    """(line number, language) of each opening fence with no `checked:` mark before it."""
    inside = False
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if not inside and not (i and MARK.search(lines[i - 1])):
                yield i + 1, line[3:].strip()
            inside = not inside


def check_page(name: str, text: str, failures: list) -> int:
    count = 0
    langs_checked = set()
    lines = text.splitlines()
    for path, line, block in blocks(text):
        if block is None:
            failures.append(f"{name}:{line}: `checked: {path}` is not followed by a code block")
            continue
        count += 1
        langs_checked.add(lines[line].strip()[3:].strip())
        source = ROOT / path
        if not source.is_file():
            failures.append(f"{name}:{line}: {path} does not exist")
        elif not found_in(block, source.read_text(encoding="utf-8").splitlines()):
            failures.append(
                f"{name}:{line}: the example is not, line for line, in {path}; "
                "change both together"
            )
    if name == "README.md":
        for lang in RUN_LANGS:
            if lang not in langs_checked:
                failures.append(f"README.md has no checked `{lang}` example")
    for line, lang in unmarked(text):
        if lang in RUN_LANGS and name not in UNCHECKED_ALLOWED:
            failures.append(
                f"{name}:{line}: this `{lang}` block is not checked: mark it "
                "`<!-- checked: PATH -->` with a file scripts/test.sh runs that holds it"
            )
    return count


def main() -> int:
    failures, count, files = [], 0, 0
    for name in pages():
        count += check_page(name, (ROOT / name).read_text(encoding="utf-8"), failures)
        files += 1
    for f in failures:
        print(f, file=sys.stderr)
    if not failures:
        print(f"examples: {count} blocks in {files} pages (README.md, docs/*.md) found verbatim "
              "in the files scripts/test.sh runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
