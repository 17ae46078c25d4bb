#!/usr/bin/env bash
# Runs every cargo-fuzz target of panto for a fixed time each and fails if any of them
# finds a crash (panic, failed property, timeout or out-of-memory).
#
#   scripts/fuzz.sh          # 60 s per target
#   scripts/fuzz.sh 10       # 10 s per target (what scripts/test.sh runs)
#   FUZZ_TARGETS="sse config" scripts/fuzz.sh 300
#   FUZZ_SANITIZER=none scripts/fuzz.sh 20    # no AddressSanitizer: faster build and runs
#
# Corpora start from the real provider captures in tests/fixtures/real/ and the small
# seeds in fuzz/seeds/; libFuzzer adds what it finds to fuzz/corpus/<target>/ (not
# committed), so later runs resume from there. Crash reproducers land in
# fuzz/artifacts/<target>/; turn each one into a file under
# core/tests/fuzz_regressions/<target>/ so `cargo test` replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds="${1:-60}"
case "$seconds" in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [seconds per target]" >&2; exit 2 ;;
esac
# The targets are the [[bin]]s of fuzz/Cargo.toml, their one list (the stable replay of
# saved crashes, core/tests/fuzz_regressions.rs, reads it too).
all_targets=$(awk '/^\[/ { bin = ($0 == "[[bin]]") } bin && /^name *=/ { gsub(/[" ]/, "", $0); sub(/^name=/, ""); print }' fuzz/Cargo.toml)
read -r -a targets <<<"${FUZZ_TARGETS:-$(echo $all_targets)}"
[ ${#targets[@]} -gt 0 ] || { echo "fuzz: no [[bin]] targets in fuzz/Cargo.toml" >&2; exit 1; }

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: the nightly Rust toolchain is required (cargo-fuzz needs -Zsanitizer);" >&2
  echo "      install it with: rustup toolchain install nightly --profile minimal" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is missing; installing it (cargo install cargo-fuzz --locked)"
  cargo install cargo-fuzz --locked
fi

# One target dir for the build and every run: the targets are built once, and `cargo
# fuzz run` then finds them up to date. The same flags must go to build and run, or run
# rebuilds. 16 codegen units build much faster than cargo-fuzz's default of 1, which
# matters more here than the last bit of executions per second.
target_dir="${CARGO_TARGET_DIR:-$root/fuzz/target}"
flags=(--fuzz-dir "$root/fuzz" --target-dir "$target_dir" --codegen-units 16
  --sanitizer "${FUZZ_SANITIZER:-address}")

echo "==> fuzz: seeding corpora"
seed() { # seed <target> <file> [prefix byte in octal]
  mkdir -p "$root/fuzz/corpus/$1"
  local dest="$root/fuzz/corpus/$1/seed-$(basename "$(dirname "$2")")-$(basename "$2")"
  if [ -n "${3:-}" ]; then
    { printf "\\$3"; cat "$2"; } >"$dest"
  else
    cp "$2" "$dest"
  fi
}
mkdir -p fuzz/logs
for meta in tests/fixtures/real/*/*.meta.json; do
  body="${meta%.meta.json}.sse"
  if [ -f "$body" ]; then
    # The sse target reads a chunking header first; a 0 byte means "one piece".
    seed sse "$body" 000
  else
    body="${meta%.meta.json}.error.json" # a non-200 answer: the decoders also parse these
    [ -f "$body" ] || continue
  fi
  case "$(tr -d ' \n' <"$meta")" in
    *'"sdk":"openai"'*)
      seed decoder_openai "$body"
      seed openai_chunk_scan "$body"
      ;;
    *'"sdk":"anthropic"'*) seed decoder_anthropic "$body" ;;
  esac
done
# Gemini's streams, written from the documented format (no real captures).
for body in tests/fixtures/gemini/*.sse; do
  seed sse "$body" 000
  seed decoder_gemini "$body"
done
# The OpenAI Responses streams are written from the documented format (no captures).
for body in tests/fixtures/responses/*.sse; do
  seed sse "$body" 000
  seed decoder_responses "$body"
done
for t in config history output_schema; do
  for f in fuzz/seeds/"$t"/*; do seed "$t" "$f"; done
done
# The MCP framings (stdio lines, SSE and JSON answers) behind the mcp target's chunking
# header: one piece, a message cap of 16 + 4 * 64 bytes (see panto_testkit::fuzz::mcp).
for f in fuzz/seeds/mcp/*; do seed mcp "$f" 100; done

echo "==> fuzz: building ${#targets[@]} targets (cargo +nightly fuzz build)"
build_started=$SECONDS
if ! cargo +nightly fuzz build "${flags[@]}"; then
  # Not a crash: say what could explain it (the toolchain, a full disk).
  echo "fuzz: FAILED: the targets did not build ($(cargo +nightly --version 2>&1)); free space:" >&2
  df -h "$(dirname "$target_dir")" >&2 || true
  exit 1
fi
echo "fuzz: build took $((SECONDS - build_started)) s"

failed=()
for t in "${targets[@]}"; do
  echo "==> fuzz: $t for ${seconds} s"
  mkdir -p "fuzz/artifacts/$t"
  before=$(ls "fuzz/artifacts/$t")
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  log="fuzz/logs/$t.log"
  # -timeout: an input that runs 10 s is a hang, reported like a crash.
  if ! cargo +nightly fuzz run "${flags[@]}" "$t" "$root/fuzz/corpus/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 "${dict[@]}" >"$log" 2>&1; then
    failed+=("$t")
  fi
  # The full log is in fuzz/logs/; show all but libFuzzer's per-input progress lines,
  # newly covered functions and dictionary suggestions.
  grep -avE '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)|^[[:space:]]+NEW_FUNC|# Uses: [0-9]+$|ecommended dictionary' \
    "$log" | tail -n 80 || true
  new=$(comm -13 <(printf '%s\n' "$before") <(ls "fuzz/artifacts/$t"))
  if [ -n "$new" ]; then
    [[ " ${failed[*]-} " == *" $t "* ]] || failed+=("$t")
    while read -r f; do
      echo "fuzz: $t: reproducer fuzz/artifacts/$t/$f"
      echo "      replay: cargo +nightly fuzz run ${t} fuzz/artifacts/$t/$f"
    done <<<"$new"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (reproducers above; save each one under" >&2
  echo "      core/tests/fuzz_regressions/<target>/ so cargo test replays it)" >&2
  exit 1
fi
echo "fuzz: no crashes in ${#targets[@]} targets x ${seconds} s"
