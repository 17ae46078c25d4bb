#!/usr/bin/env bash
# Builds the C tests (capi/tests/c) with the system compiler against the shared
# libpanto.so and runs them under valgrind memcheck: any memory error or leak fails
# (the only suppressions, in valgrind.supp, are the worker pool's process-lifetime
# threads, explained there).
#
#   capi/tests/c/run.sh [TEST_NAME]         # all tests, or one
#   PANTO_NO_VALGRIND=1 capi/tests/c/run.sh # natively, for a quick local loop
set -euo pipefail
cd "$(dirname "$0")/../../.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
cc="${CC:-cc}"

cargo build --locked -q -p panto-capi -p panto-testserver

# The library's soname is libpanto.so.<ABI major>: link and run through that name, as
# an installed program would.
major=$(sed -n 's/^version = "\([0-9][0-9]*\)\..*"/\1/p' capi/Cargo.toml | head -n 1)
out="$target/capi-c"
mkdir -p "$out/lib"
ln -sf "$target/debug/libpanto.so" "$out/lib/libpanto.so.$major"
ln -sf "libpanto.so.$major" "$out/lib/libpanto.so"

"$cc" -std=c11 -Wall -Wextra -Werror -g -O1 -pthread -I capi/include \
  capi/tests/c/test_capi.c capi/tests/c/harness.c \
  -L "$out/lib" -lpanto -Wl,-rpath,"$out/lib" -o "$out/test_capi"

args=("$target/debug/panto-testserver" capi/tests/scenarios
      tests/server/scenarios/demo-weather.json "$@")
if [ -n "${PANTO_NO_VALGRIND:-}" ]; then
  exec "$out/test_capi" "${args[@]}"
fi
if ! command -v valgrind >/dev/null; then
  echo "valgrind is required for the C tests (apt-get install valgrind)" >&2
  exit 1
fi
exec valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
  --show-leak-kinds=definite,possible --errors-for-leak-kinds=definite,possible \
  --num-callers=40 --suppressions=capi/tests/c/valgrind.supp --quiet \
  "$out/test_capi" "${args[@]}"
