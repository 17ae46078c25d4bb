#!/usr/bin/env bash
# The cross-language conformance suite: every scenario of tests/conformance/scenarios/
# through seven runners — Rust pull, the CLI (`panto run --json`), Rust push, C, Go,
# Python sync and Python async — each printing the trace from its own language's event
# objects; every trace must equal the scenario's golden trace (tests/conformance/README.md).
#
#   scripts/conformance.sh                    # build the runners, run everything
#   scripts/conformance.sh --scenario NAME    # only these scenarios (repeatable)
#   scripts/conformance.sh --only go,c        # only these runners
#   scripts/conformance.sh --update           # rewrite the golden traces from Rust pull
#   scripts/conformance.sh --self-test        # prove a changed binding mapping fails
#                                             # (Go's json tag, Python's attribute; with
#                                             # --only, those of the runners named)
#
# Reuses what scripts/test.sh built: the debug workspace binaries, the release
# libpanto.a (C and Go link it) and the Python venv with the panto wheel installed
# ($CARGO_TARGET_DIR/pypanto-venv; built here when missing, or set PANTO_PYTHON).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
target="$CARGO_TARGET_DIR"
out="$target/conformance"
mkdir -p "$out"

update=
self_test=
only=
passthrough=()
while [ $# -gt 0 ]; do
  case "$1" in
    --update) update=1 ;;
    --self-test) self_test=1 ;;
    --only) only="$2"; shift ;;
    --scenario) passthrough+=(--scenario "$2"); shift ;;
    *) echo "usage: $0 [--update] [--self-test] [--only RUNNER,...] [--scenario NAME]..." >&2; exit 2 ;;
  esac
  shift
done
wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

echo "conformance: building the runners" >&2
scripts/debug-build.sh --locked -q -p panto-testserver -p panto-cli
scripts/debug-build.sh --locked -q -p panto-pull --example conformance
scripts/debug-build.sh --locked -q -p panto --example conformance_push
if wanted c || wanted go; then
  cargo build --locked -q --release -p panto-capi
fi
static_libs=$(cat "$target/release/libpanto.native-static-libs" 2>/dev/null || echo "-lpthread -lm -ldl")
if wanted c; then
  # shellcheck disable=SC2086  # the library list is meant to be split
  "${CC:-cc}" -std=c11 -Wall -Wextra -Werror -pthread -I capi/include capi/examples/conformance.c \
    "$target/release/libpanto.a" $static_libs -o "$out/c-runner"
fi
build_go_runner() { # $1: the Go module's directory, $2: the binary to write
  local ldflags
  ldflags=$(scripts/cgo-ldflags.sh "$target/release")
  (cd "$1" && CGO_ENABLED=1 CGO_LDFLAGS="$ldflags" go build -o "$2" ./internal/conformance)
}
if wanted go; then
  build_go_runner golang "$out/go-runner"
fi
python="${PANTO_PYTHON:-$target/pypanto-venv/bin/python}"
# The installed native module, if any; rebuilt when a Rust or Python source is newer.
py_native=$("$python" -c 'import panto._native as n; print(n.__file__)' 2>/dev/null || true)
py_stale=""
if [ -z "$py_native" ] || [ -n "$(find core/src pull-adapter/src pypanto/src pypanto/python \
    -newer "$py_native" -print -quit 2>/dev/null)" ]; then
  py_stale=1
fi
if (wanted python-sync || wanted python-async) && [ -z "${PANTO_PYTHON:-}" ] && [ -n "$py_stale" ]; then
  echo "conformance: building the Python wheel into $target/pypanto-venv" >&2
  py_tools="$(pypanto/tools-venv.sh)"
  rm -rf "$target/pypanto-wheels" "$target/pypanto-venv"
  "$py_tools/bin/maturin" build --quiet --profile dev --locked -m pypanto/Cargo.toml -o "$target/pypanto-wheels"
  python3 -m venv "$target/pypanto-venv"
  "$target/pypanto-venv/bin/python" -m pip install --quiet --disable-pip-version-check "$target"/pypanto-wheels/panto-*.whl
  python="$target/pypanto-venv/bin/python"
fi

runners=()
add() { if wanted "$1"; then runners+=(--runner "$1=$2"); fi; }
add rust-pull "$target/debug/examples/conformance"
add cli "python3 tests/conformance/cli_runner.py $target/debug/panto"
add rust-push "$target/debug/examples/conformance_push"
add c "$out/c-runner"
add go "$out/go-runner"
add python-sync "$python pypanto/examples/conformance.py"
add python-async "$python pypanto/examples/conformance.py --async"
driver=(python3 tests/conformance/conformance.py --server "$target/debug/panto-testserver")

if [ -n "$update" ]; then
  exec "${driver[@]}" --runner "rust-pull=$target/debug/examples/conformance" --update rust-pull \
    "${passthrough[@]}"
fi

"${driver[@]}" "${runners[@]}" "${passthrough[@]}"

if [ -n "$self_test" ] && wanted go; then
  # A changed field in one binding's mapping must fail the suite, naming the runner, the
  # scenario and the line: a copy of the Go module whose ToolResult writes `iserror` for
  # `is_error` (a json tag), and whose BlockComplete.Text (a convenience field, not in
  # the JSON) holds the wrong string. Both live in the generated events_gen.go. The
  # copy lives in the build directory; the tree is not touched.
  echo "conformance self-test: a Go binding that maps tool_result.is_error and BlockComplete.Text wrongly" >&2
  mutant="$out/mutant-golang"
  rm -rf "$mutant"
  cp -r golang "$mutant"
  sed -i -e 's/`json:"is_error"`/`json:"iserror"`/' \
    -e '/case [0-9]*: \/\/ block_complete/,/return e/ s/Text: *goStr(p\.text)/Text: goStr(p.name)/' \
    "$mutant/events_gen.go"
  if [ "$(diff golang/events_gen.go "$mutant/events_gen.go" | grep -c '^>')" != 2 ]; then
    echo "self-test: the two mutations did not apply (golang/events_gen.go changed?)" >&2
    exit 1
  fi
  build_go_runner "$mutant" "$out/go-mutant-runner"
  set +e
  report=$("${driver[@]}" --runner "go=$out/go-mutant-runner" --scenario openai-tool-single \
    --scenario openai-text 2>&1)
  status=$?
  set -e
  rm -rf "$mutant"
  for expected in "FAIL go / openai-tool-single / line 9: missing field 'is_error'" \
                  "FAIL go / openai-text / line 6: field 'content'"; do
    if [ "$status" -ne 1 ] || [[ "$report" != *"$expected"* ]]; then
      printf '%s\n' "$report" >&2
      echo "self-test FAILED: expected exit 1 and \"$expected\" (exit $status)" >&2
      exit 1
    fi
  done
  # Shown relabelled: these failures are the expected ones, and a log reader (or a CI
  # summary looking for "FAIL") must not take them for the run's own.
  printf '%s\n' "$report" | grep -A3 "^FAIL" | sed 's/^FAIL /caught, as intended: /' >&2
  echo "conformance self-test: the changed mappings were caught (runner, scenario, line named)" >&2
fi

if [ -n "$self_test" ] && wanted python-sync; then
  # The Python runner reads each event's attributes, so renaming one attribute of the
  # binding must fail the suite, naming python: a copy of the package whose ToolResult
  # offers `iserror` instead of `is_error`, built into its own venv. The copy lives in
  # the build directory; the tree is not touched.
  echo "conformance self-test: a Python binding whose ToolResult.is_error is renamed" >&2
  mutant="$out/mutant-pypanto"
  rm -rf "$mutant" "$mutant-wheels" "$mutant-venv"
  cp -r pypanto "$mutant"
  # Its path dependencies (../core, ../pull-adapter) point back into this tree.
  sed -i "s|path = \"\.\./|path = \"$PWD/|" "$mutant/Cargo.toml"
  perl -0pi -e 's/#\[pyo3\(get\)\]\n(\s+)is_error: bool,/#[pyo3(get, name = "iserror")]\n$1is_error: bool,/' \
    "$mutant/src/events_gen.rs"
  if cmp -s pypanto/src/events_gen.rs "$mutant/src/events_gen.rs"; then
    echo "self-test: the mutation did not apply (pypanto/src/events_gen.rs changed?)" >&2
    exit 1
  fi
  py_tools="$(pypanto/tools-venv.sh)"
  "$py_tools/bin/maturin" build --quiet --profile dev --locked -m "$mutant/Cargo.toml" -o "$mutant-wheels"
  python3 -m venv "$mutant-venv"
  "$mutant-venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
    "$mutant-wheels"/panto-*.whl
  set +e
  report=$("${driver[@]}" --runner "python-sync=$mutant-venv/bin/python pypanto/examples/conformance.py" \
    --scenario openai-tool-single 2>&1)
  status=$?
  set -e
  rm -rf "$mutant" "$mutant-wheels" "$mutant-venv"
  expected="FAIL python-sync / openai-tool-single / line 9: missing field 'is_error'"
  if [ "$status" -ne 1 ] || [[ "$report" != *"$expected"* ]]; then
    printf '%s\n' "$report" >&2
    echo "self-test FAILED: expected exit 1 and \"$expected\" (exit $status)" >&2
    exit 1
  fi
  # Shown relabelled: these failures are the expected ones, and a log reader (or a CI
  # summary looking for "FAIL") must not take them for the run's own.
  printf '%s\n' "$report" | grep -A3 "^FAIL" | sed 's/^FAIL /caught, as intended: /' >&2
  echo "conformance self-test: the renamed attribute was caught (runner, scenario, line named)" >&2
fi
