#!/usr/bin/env python3
"""pypanto builds against the dependency versions the workspace is tested with.

pypanto/ is its own cargo workspace with its own Cargo.lock (see pypanto/Cargo.toml for
why), so nothing stops the two lock files from drifting apart: the wheel would then ship
a tokio, reqwest or serde that no Rust test ran against. This check asks cargo for what
the crates the two share (panto and panto-pull) build with — normal and build
dependencies, every target platform — under each lock file, and requires the same
(crate, version) list from both, tokio, reqwest and serde among them.

    scripts/check-lock-sync.py              # the repository's two lock files (needs cargo)
    scripts/check-lock-sync.py --self-test  # a drifted tokio, or a missing one, must fail

To bring pypanto's lock back in line with the workspace's:

    cp Cargo.lock pypanto/Cargo.lock && cargo update --workspace --manifest-path pypanto/Cargo.toml
"""

import subprocess
import sys
from pathlib import Path

ROOTS = ("panto", "panto-pull")
# Named in the check's contract: were one of them missing from the list (renamed,
# replaced), the check would compare less than it claims.
REQUIRED = ("tokio", "reqwest", "serde")
ROOT = Path(__file__).resolve().parent.parent


def dependencies(manifest: Path) -> set[tuple[str, str]]:
    """(name, version) of every crate ROOTS build with under manifest's lock file."""
    cmd = ["cargo", "tree", "--locked", "--manifest-path", str(manifest),
           "--target", "all", "-e", "normal,build", "--prefix", "none", "-f", "{p}"]
    for root in ROOTS:
        cmd += ["-p", root]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        raise SystemExit(f"cargo tree failed for {manifest}")
    out = run.stdout
    found = set()
    for line in out.splitlines():
        # "tokio v1.54.1", "panto v0.1.0 (/path/core)", a repeat ends in "(*)".
        fields = line.split()
        if len(fields) >= 2 and fields[1].startswith("v"):
            found.add((fields[0], fields[1][1:]))
    return found


def compare(ours: set[tuple[str, str]], theirs: set[tuple[str, str]]) -> list[str]:
    problems = []
    for name in REQUIRED:
        if not any(n == name for n, _ in ours):
            problems.append(f"{name} is not a dependency of {'/'.join(ROOTS)} any more")
    for name in sorted({n for n, _ in ours ^ theirs}):
        a = sorted(v for n, v in ours if n == name) or ["absent"]
        b = sorted(v for n, v in theirs if n == name) or ["absent"]
        problems.append(f"{name}: workspace {', '.join(a)}; pypanto {', '.join(b)}")
    return problems


def self_test() -> None:
    ours = dependencies(ROOT / "Cargo.toml")
    if compare(ours, set(ours)):
        raise SystemExit("self-test: equal lists do not pass")
    drifted = {(n, "0.0.1" if n == "tokio" else v) for n, v in ours}
    if not any(p.startswith("tokio:") for p in compare(ours, drifted)):
        raise SystemExit("self-test: a pypanto lock with another tokio passed the check")
    no_serde = {(n, v) for n, v in ours if n != "serde"}
    if not any(p.startswith("serde ") for p in compare(no_serde, no_serde)):
        raise SystemExit("self-test: a walk without serde passed the check")
    print("check-lock-sync self-test: a drifted tokio and a missing serde fail the check")


def main() -> None:
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if sys.argv[1:]:
        raise SystemExit(__doc__)
    ours = dependencies(ROOT / "Cargo.toml")
    problems = compare(ours, dependencies(ROOT / "pypanto/Cargo.toml"))
    if problems:
        print("pypanto/Cargo.lock resolves the shared dependencies differently:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print("To bring" + __doc__.split("To bring")[1].rstrip(), file=sys.stderr)
        sys.exit(1)
    print(f"Cargo.lock and pypanto/Cargo.lock agree on the {len(ours)} crates "
          f"{' and '.join(ROOTS)} build with")


if __name__ == "__main__":
    main()
