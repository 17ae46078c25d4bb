#!/usr/bin/env bash
# Every panto binding against the client its users would otherwise pick, in one run, into
# one table: bench/RESULTS.md.
#
#   scripts/bench.sh            the full run (about 55 minutes on a loaded 2-core machine once
#                               built: the scale workload is about 25 of them, most of it
#                               openai-python's row, ≈ 5 minutes a run at 6,000 streams)
#   scripts/bench.sh --quick    fewer rounds and turns (about 20 minutes once built)
#   scripts/bench.sh --only-scale   only the scale workload: 10,000 concurrent streams (20
#                               chunks each, 200 ms apart, started evenly over 2 s), merged
#                               into an existing bench/RESULTS.md (its section and targets
#                               are replaced and say when they were measured); 3 runs per
#                               row, 1 with --quick (about 25 / 8 minutes once built on a
#                               loaded 2-core machine). Where the descriptor limit cannot
#                               hold 10,000 (panto Go needs 3 per stream, the test server 2
#                               per connection), the most thousands it holds, said so
#   scripts/bench.sh --only-scale --scale-streams 2000 --scale-rounds 1   a smaller scale run
#   scripts/bench.sh --quick --only rust/panto-pull,rust/panto-push   some rows only
#   scripts/bench.sh --note "quiet machine"        a line about the load, for the report
#   scripts/bench.sh --profile rust/panto-pull:text-100k   where one client's CPU goes (perf)
#   scripts/bench.sh --profile go/panto-iter:scale         the same for a row of the scale workload
#   scripts/bench.sh --ttfe-sweep    Rust time to first event by response length (µs)
#
# Builds the release artefacts (panto-testserver, libpanto.a, the Rust, C and Go bench
# clients, the Python wheel in a venv with openai-python and httpx), then bench/run.py
# starts panto-testserver processes on 127.0.0.1 (port 0), shows their raw rate with
# curl, runs every client as its own process, round after round, and writes the table.
# The clients: tests/peers-bench (Rust: floor, eventsource-stream + serde, async-openai,
# panto push and pull), capi/bench/bench.c (panto_next_event), golang/bench/client
# (panto Next and Iter, openai-go), pypanto/bench/client.py (panto sync and async,
# openai-python, httpx + json.loads). No network besides the package registries for the
# first build; no API key.
#
# The scale workload opens a connection per stream in one client process, and panto's Go
# streams hold two more descriptors each (readiness descriptor, netpoller copy): the
# descriptor limit is raised here (hard limit too when allowed, i.e. as root) and again by
# bench/run.py, so that panto-testserver and every client inherit it.
#
#   scripts/bench.sh --charts-only   only redraw bench/charts/*.svg (bench/svg.py) from the
#                               committed report's tables, and their section of it: no
#                               build, no measuring, seconds
#
# BENCH_OUT=FILE writes the table elsewhere (default bench/RESULTS.md; bench/misses.md is
# appended as its misses section). PANTO_BENCH_GO=0 / PANTO_BENCH_PYTHON=0 skip a
# language. Figures are measured, never asserted: compare ratios from the same run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
target="$CARGO_TARGET_DIR"
out="${BENCH_OUT:-bench/RESULTS.md}"
if [[ "${1:-}" == --charts-only ]]; then
  exec python3 bench/run.py --charts-only "$out"
fi
start=$SECONDS
work="$(mktemp -d "${TMPDIR:-/tmp}/panto-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT

step() { echo "==> $*" >&2; }

ulimit -Hn 65536 2>/dev/null || true
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

step "release build: panto-testserver, libpanto"
cargo build --release --locked -q -p panto-testserver -p panto-capi

step "Rust clients (tests/peers-bench: its own workspace, async-openai is heavy)"
(cd tests/peers-bench && cargo build --release --locked -q)
clients="{\"rust\": [\"$target/release/panto-peers-bench\"]"

step "C client (capi/bench/bench.c against libpanto.a)"
# What Rust's standard library needs on Linux (scripts/install-capi.sh records the exact
# list when it builds the library).
native="$(cat "$target/release/libpanto.native-static-libs" 2>/dev/null || echo -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc)"
# shellcheck disable=SC2086  # the library list is meant to be split
"${CC:-cc}" -std=c11 -O2 -Wall -Wextra -Werror -Icapi/include capi/bench/bench.c \
    "$target/release/libpanto.a" $native -o "$target/release/panto-c-bench"
clients+=", \"c\": [\"$target/release/panto-c-bench\"]"

versions="{\"Rust\": \"$(rustc --version)\", \"C compiler\": \"$("${CC:-cc}" --version | head -n 1)\""
versions+=", \"async-openai\": \"$(grep -A1 '^name = "async-openai"$' tests/peers-bench/Cargo.lock | sed -n 's/version = "\(.*\)"/\1/p')\""

if [[ "${PANTO_BENCH_GO:-1}" != 0 ]] && command -v go >/dev/null 2>&1; then
    step "Go client (golang/bench/client, static libpanto.a)"
    ldflags=$(scripts/cgo-ldflags.sh "$target/release")
    (cd golang/bench && CGO_LDFLAGS="$ldflags" go build -o "$target/release/panto-go-bench" ./client)
    clients+=", \"go\": [\"$target/release/panto-go-bench\"]"
    versions+=", \"Go\": \"$(go version | cut -d' ' -f3-)\""
    versions+=", \"openai-go\": \"$(sed -n 's/.*openai-go\/v3 \(v[^ ]*\).*/\1/p' golang/bench/go.mod)\""
else
    step "go not found or PANTO_BENCH_GO=0: no Go rows"
fi

if [[ "${PANTO_BENCH_PYTHON:-1}" != 0 ]] && command -v python3 >/dev/null 2>&1; then
    step "Python client (release wheel, openai-python, httpx in a venv)"
    py_tools="$(pypanto/tools-venv.sh)"
    rm -rf "$target/pypanto-wheels-release"
    "$py_tools/bin/maturin" build --quiet --release --locked -m pypanto/Cargo.toml \
        -o "$target/pypanto-wheels-release" >&2
    py_bench="$target/pypanto-bench-venv"
    rm -rf "$py_bench"
    python3 -m venv "$py_bench"
    "$py_bench/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$target/pypanto-wheels-release"/panto-*.whl openai==3.57.0 httpx==0.28.1 >&2
    clients+=", \"python\": [\"$py_bench/bin/python\", \"$PWD/pypanto/bench/client.py\"]"
    py_versions=$("$py_bench/bin/python" -c \
        'import sys, openai, httpx; print(sys.version.split()[0], "/ openai-python", openai.__version__, "/ httpx", httpx.__version__)')
    versions+=", \"Python\": \"$py_versions\""
else
    step "python3 not found or PANTO_BENCH_PYTHON=0: no Python rows"
fi
clients+="}"
versions+="}"
printf '%s\n' "$clients" >"$work/clients.json"
printf '%s\n' "$versions" >"$work/versions.json"
echo "built in $((SECONDS - start)) s" >&2

if [[ " $* " == *" --profile "* || " $* " == *" --ttfe-sweep "* ]]; then
    # Diagnostics, no table: a profile of one client (perf), e.g. --profile
    # rust/panto-pull:text-100k, or --ttfe-sweep (time to first event by response length).
    python3 bench/run.py --clients "$work/clients.json" --testserver "$target/release/panto-testserver" \
        --out /dev/null "$@"
    exit
fi

step "measuring (bench/run.py $*)"
python3 bench/run.py --clients "$work/clients.json" --versions "$work/versions.json" \
    --testserver "$target/release/panto-testserver" --out "$out" --misses bench/misses.md \
    --json-out "$work/samples.json" "$@" >/dev/null
if [[ " $* " == *" --only-scale "* ]]; then
    cp "$work/samples.json" "${out%.md}.scale-samples.json"
else
    cp "$work/samples.json" "${out%.md}.samples.json"
fi
echo >&2
echo "wrote $out (and ${out%.md}.samples.json) in $((SECONDS - start)) s" >&2
