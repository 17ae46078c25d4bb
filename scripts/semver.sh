#!/usr/bin/env bash
# The Rust API of panto and panto-pull against the released baseline, with
# cargo-semver-checks (pinned below; installed if missing, as .ci/run does).
#
# The baseline is the commit recorded in baseline/rust-api-rev (v0.1.0: a clone need not
# carry tags, but it carries that commit). cargo-semver-checks builds its rustdoc JSON in
# a scratch checkout under the target dir (cached there for later runs) and the working
# tree's, both with the stable toolchain, and runs its lints over the pair as for a
# release that may add to the API but not break it (--release-type minor). Only the
# documented API counts: #[doc(hidden)] items are outside it. Every break it reports
# must be listed in baseline/accepted-breaks — the recorded decision that the next
# release breaks that item — or this fails, naming the break.
#
#   scripts/semver.sh
#   PANTO_SEMVER_ACCEPTED=/dev/null scripts/semver.sh   # as if nothing were accepted:
#                                                       # fails on any break since v0.1.0
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

version=0.51.0
if ! cargo semver-checks --version 2>/dev/null | grep -qx "cargo-semver-checks $version"; then
  echo "semver: installing cargo-semver-checks $version"
  cargo install --locked --quiet cargo-semver-checks --version "=$version"
fi

rev=$(tr -d '[:space:]' <baseline/rust-api-rev)
accepted="${PANTO_SEMVER_ACCEPTED:-baseline/accepted-breaks}"
if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
  echo "semver: the baseline commit $rev (baseline/rust-api-rev) is not in this clone;" >&2
  echo "        a shallow clone lacks it: git fetch --unshallow" >&2
  exit 1
fi

echo "semver: panto and panto-pull against $rev (v0.1.0)"
report="$CARGO_TARGET_DIR/semver-report.txt"
status=0
cargo semver-checks check-release -p panto -p panto-pull --baseline-rev "$rev" \
  --release-type minor --color never >"$report" 2>&1 || status=$?
grep -E '^ +(Checked|Summary)|^--- failure|^error' "$report" || true
python3 - "$report" "$accepted" "$status" <<'PY'
import re, sys
report, accepted_path, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
found, lint, listing = set(), None, False
for line in open(report):
    line = line.rstrip("\n")
    m = re.match(r"^--- failure (\w+):", line)
    if m:
        lint, listing = m.group(1), False
    elif line.startswith("Failed in:"):
        listing = True
    elif listing and line.startswith("  ") and lint:
        # The location goes: "in file <path>:<line>" for some lints, "in <path>:<line>"
        # for others (absolute, so it differs between clones).
        found.add(f"{lint}: {re.sub(r' in (file )?/.*$', '', line.strip())}")
    elif listing and not line.strip():
        listing = False
accepted = {l.strip() for l in open(accepted_path) if l.strip() and not l.startswith("#")}
if status != 0 and not found:
    sys.exit(f"semver: cargo-semver-checks failed without a report of breaks (exit {status}); see {report}")
unexpected, stale = sorted(found - accepted), sorted(accepted - found)
for s in stale:
    print(f"semver: accepted but no longer reported (remove from {accepted_path}): {s}")
for u in unexpected:
    print(f"SEMVER BREAK: {u}")
if unexpected:
    sys.exit(f"semver: {len(unexpected)} breaking change(s) since v0.1.0 not in {accepted_path}: "
             "undo each, or record it there (and in CHANGELOG.md's Unreleased section)")
print(f"semver: {len(found)} break(s) since v0.1.0, every one recorded in {accepted_path}: OK")
PY
