#!/usr/bin/env bash
# The declared minimum Rust version (rust-version in Cargo.toml) is real: the workspace's
# libraries and binaries build with that toolchain (installed through rustup if missing).
#
# Cargo.lock pins what the current toolchain builds with, and some of its versions need a
# newer Rust (icu_* 2.4 need 1.88); a user on the minimum version gets versions that
# support it from cargo's MSRV-aware resolver instead. So does this check: the tracked
# sources are copied into the target dir, their lock file resolved again there with
# CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback (the committed Cargo.lock is never
# touched), and `cargo check` runs with the old toolchain. Then its own test: a call
# stabilized after that version (Vec::pop_if, Rust 1.86) added to the copy must fail.
#
#   scripts/check-msrv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
[ -n "$msrv" ] || { echo "msrv: no rust-version in Cargo.toml" >&2; exit 1; }
toolchain="$msrv.0"
[[ "$msrv" == *.*.* ]] && toolchain=$msrv
if ! cargo "+$toolchain" --version >/dev/null 2>&1; then
  echo "msrv: installing Rust $toolchain (rustup, minimal profile)"
  rustup toolchain install "$toolchain" --profile minimal
fi

src="$CARGO_TARGET_DIR/msrv-src"
rm -rf "$src"
mkdir -p "$src"
git ls-files -z -- Cargo.toml Cargo.lock core pull-adapter otel tests/testkit tests/server cli capi tools |
  tar --null -T - -c | tar -x -C "$src"
cd "$src"
echo "msrv: resolving for Rust $toolchain (CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback)"
CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo "+$toolchain" generate-lockfile --quiet
build=(cargo "+$toolchain" check --locked --quiet --target-dir "$CARGO_TARGET_DIR/msrv")
echo "msrv: cargo +$toolchain check (workspace libraries and binaries, all features)"
"${build[@]}" --workspace --lib --bins --all-features
echo "msrv: the workspace builds with Rust $toolchain: OK"

echo "msrv: self-test (Vec::pop_if, stable since 1.86, must not build with $toolchain)"
printf '\n#[doc(hidden)]\npub fn msrv_probe(v: &mut Vec<u8>) -> Option<u8> {\n    v.pop_if(|x| *x > 0)\n}\n' \
  >>core/src/lib.rs
if "${build[@]}" -p panto --lib >"$CARGO_TARGET_DIR/msrv-selftest.txt" 2>&1; then
  echo "msrv: SELF-TEST FAILED: a 1.86 API built with $toolchain" >&2
  exit 1
fi
echo "  ok: $(grep -m1 -E '^error' "$CARGO_TARGET_DIR/msrv-selftest.txt")"
cd "$root"
rm -rf "$src"
