#!/usr/bin/env bash
# Runs panto's benchmarks in release and prints a summary table.
#
#   scripts/bench.sh                  quick settings (a few minutes on 2 cores)
#   scripts/bench.sh http             extra arguments go to both bench binaries
#                                     (criterion filters and flags)
#   BENCH_ARGS="--warm-up-time 3 --measurement-time 10" scripts/bench.sh   longer runs
#   BENCH_LOG=bench.log scripts/bench.sh                                    keep the full log
#
# Benches (see their headers): core/benches/decode.rs (µs per chunk of a 100,000-chunk
# OpenAI stream, panto vs peers measured in the same run), pull-adapter/benches/pull.rs
# (pull Stream vs push Receiver per event, time to first event; run twice: on a quiet
# machine, then with a CPU hog busy on every core beside it),
# pull-adapter/benches/concurrency.rs (1, 64 and 1,000 paced streams at once: CPU per
# event, added latency, threads, memory; pull vs push on one thread) and
# pypanto/bench/bench.py (the Python package against openai-python and raw httpx). All use
# the in-process panto-testserver on 127.0.0.1: no network besides the package registries
# for the first build. PANTO_BENCH_LOADED=0 skips the loaded pass.
# Figures are printed, never asserted: compare ratios measured in the same run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

read -r -a quick <<<"${BENCH_ARGS:---warm-up-time 1 --measurement-time 3}"
extra=("$@")
if [[ -n "${BENCH_LOG:-}" ]]; then
    log="$BENCH_LOG"
    : >"$log"
else
    log="$(mktemp "${TMPDIR:-/tmp}/panto-bench.XXXXXX")"
    trap 'rm -f "$log"' EXIT
fi

run_bench() {
    echo "==> cargo bench $*" >&2
    cargo bench "$@" 2>&1 | tee -a "$log"
}

start=$SECONDS
run_bench -p panto --bench decode -- ${quick[@]+"${quick[@]}"} ${extra[@]+"${extra[@]}"}
run_bench -p panto-pull --bench pull -- ${quick[@]+"${quick[@]}"} ${extra[@]+"${extra[@]}"}
if [[ "${PANTO_BENCH_LOADED:-1}" != 0 ]]; then
    # The same pass with every core kept busy by a hog, as on a loaded CI machine.
    hogs=()
    for _ in $(seq "$(nproc)"); do
        (while :; do :; done) &
        hogs+=($!)
    done
    echo "[loaded] $(nproc) CPU hogs running" >>"$log"
    cargo bench -p panto-pull --bench pull -- ${quick[@]+"${quick[@]}"} ${extra[@]+"${extra[@]}"} 2>&1 \
        | sed -u -e 's/^\[summary\] \([^:]*\): /[summary] \1 (loaded): /' \
                 -e 's/^\[\(ratio\|target\)\] /[\1] (loaded) /' | tee -a "$log"
    kill "${hogs[@]}" 2>/dev/null || true
    wait "${hogs[@]}" 2>/dev/null || true
fi
run_bench -p panto-pull --bench concurrency
# async-openai is too heavy to build in every test run: its crate (tests/peers-bench) is a
# workspace of its own, built only here, in release, with the shared target dir.
echo "==> tests/peers-bench (panto vs async-openai and the raw floor)" >&2
(cd tests/peers-bench && cargo run --release -q) 2>&1 | tee -a "$log"

# Go binding (golang/bench, its own module): Next / Iter vs openai-go on the same
# 100,000-chunk response from panto-testserver, then 1,000 paced streams at once.
if command -v go >/dev/null 2>&1; then
    echo "==> go test -bench (golang/bench)" >&2
    target="${CARGO_TARGET_DIR:-$PWD/target}"
    cargo build --release --locked -p panto-capi -p panto-testserver >&2
    (cd golang/bench && CGO_LDFLAGS="-L$target/release" PANTO_TESTSERVER="$target/release/panto-testserver" \
        go test -run '^$' -bench . -benchtime "${GO_BENCHTIME:-3x}" ./...) 2>&1 | tee -a "$log"
    awk '/^BenchmarkPantoNext/ {for (i=1;i<NF;i++) if ($(i+1)=="cpu-ns/chunk") n=$i}
         /^BenchmarkPantoIter/ {for (i=1;i<NF;i++) if ($(i+1)=="cpu-ns/chunk") it=$i}
         /^BenchmarkOpenAIGo/  {for (i=1;i<NF;i++) if ($(i+1)=="cpu-ns/chunk") o=$i}
         END { if (n && o) {
                 printf "[summary] go: panto Next CPU per chunk: %.0f ns\n", n
                 printf "[summary] go: panto Iter CPU per chunk: %.0f ns\n", it
                 printf "[summary] go: openai-go v3 CPU per chunk: %.0f ns\n", o
                 printf "[ratio] go: panto Next / openai-go CPU per chunk: %.3f\n", n/o
                 printf "[target] go: panto <= 1/5 of openai-go: %s\n", (n/o <= 0.2 ? "met" : "missed") } }' \
        "$log" >>"$log.go" || true
    cat "$log.go" >>"$log"; rm -f "$log.go"
else
    echo "go not found: skipping the Go benchmarks" >&2
fi

# Python package (pypanto/bench/bench.py): CPU per chunk and warm time to first event of
# panto's Python streams against openai-python, raw httpx + json.loads and panto's Rust
# pull, on the same response from the same server. Needs PyPI for openai and httpx.
# PANTO_BENCH_PYTHON=0 skips it.
if [[ "${PANTO_BENCH_PYTHON:-1}" != 0 ]]; then
    echo "==> Python benchmark (pypanto/bench)" >&2
    target="${CARGO_TARGET_DIR:-$PWD/target}"
    py_tools="$(pypanto/tools-venv.sh)"
    cargo build --release --locked -p panto-testserver --bin panto-testserver 2>&1 | tail -n 1 >&2
    cargo build --release --locked --manifest-path pypanto/Cargo.toml --example pull_cpu 2>&1 | tail -n 1 >&2
    rm -rf "$target/pypanto-wheels-release"
    "$py_tools/bin/maturin" build --quiet --release --locked -m pypanto/Cargo.toml \
        -o "$target/pypanto-wheels-release" >&2
    py_bench="$target/pypanto-bench-venv"
    rm -rf "$py_bench"
    python3 -m venv "$py_bench"
    "$py_bench/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$target/pypanto-wheels-release"/panto-*.whl openai==3.57.0 httpx==0.28.1 >&2
    "$py_bench/bin/python" pypanto/bench/bench.py --server "$target/release/panto-testserver" \
        --pull "$target/release/examples/pull_cpu" --rounds "${PANTO_BENCH_ROUNDS:-3}" 2>&1 | tee -a "$log"
fi

echo
echo "== panto benchmark summary ($((SECONDS - start)) s; lower is better; ratios < 1 favour panto) =="
load="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)"
if [[ -n "$load" ]]; then
    echo "load average at the end: $load (figures are noisier on a busy machine)"
fi
echo
printf '%-56s %s\n' "variant" "figure"
printf '%-56s %s\n' "-------" "------"
{ grep -a '^\[summary\] ' "$log" || true; } | sed 's/^\[summary\] //' | while IFS= read -r line; do
    name="${line%%: *}"
    figure="${line#*: }"
    printf '%-56s %s\n' "$name" "$figure"
done
echo
grep -a -E '^\[ratio\] ' "$log" | sed 's/^\[ratio\] /ratio  /' || true
grep -a -E '^\[target\] ' "$log" | sed 's/^\[target\] /target /' || true
echo
grep -a -E '^\[concurrency\] ' "$log" | sed 's/^\[concurrency\] //' || true
