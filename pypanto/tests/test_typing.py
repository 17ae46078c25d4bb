"""The package's types, as a type checker sees them: ``mypy --strict`` accepts a typed
program written against panto (``typing/usage.py``: the exception classes imported by
name, ``@panto.tool`` keeping the function's signature, ``AsyncStream`` and ``final()``
typed, ``ev.type`` and ``match`` narrowing an event), reports the misuses in
``typing/errors.py`` and only those, and accepts the package's own sources."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "python"

pytest.importorskip("mypy")


def _mypy(tmp_path: Path, *args: str, cwd: Path = HERE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--show-error-codes",
         "--cache-dir", str(tmp_path / "mypy-cache"), *args],
        capture_output=True, text=True, cwd=cwd, timeout=600,
    )


def test_mypy_strict_accepts_a_typed_program(tmp_path):
    r = _mypy(tmp_path, "typing/usage.py")
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr


def test_mypy_strict_reports_the_misuses_and_only_them(tmp_path):
    source = (HERE / "typing" / "errors.py").read_text().splitlines()
    expected = {(i + 1, m.group(1)) for i, line in enumerate(source) if (m := re.search(r"# E: ([\w-]+)", line))}
    r = _mypy(tmp_path, "typing/errors.py")
    reported = {(int(m.group(1)), m.group(2)) for m in re.finditer(r"^typing/errors\.py:(\d+): error: .*\[([\w-]+)\]$", r.stdout, re.M)}
    assert reported == expected, r.stdout


def test_mypy_strict_accepts_the_package_sources(tmp_path):
    r = _mypy(tmp_path, "-p", "panto", cwd=PACKAGE)
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
