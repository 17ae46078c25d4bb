#!/usr/bin/env bash
# The drift check of the C ABI. capi/include/panto.h is written by hand and is the
# contract; this script fails on any difference between it and the Rust crate:
#
#   1. cbindgen (pinned 0.29.x; installed if missing) generates a header from the crate
#      into the build directory — never over include/panto.h — and capi/tools/abi_check.py
#      compares the two semantically: function signatures (typedefs resolved), struct and
#      union fields in order with their types, typedef targets, constant values.
#   2. The panto_* symbols libpanto.so exports (nm -D) are exactly the header's functions,
#      each versioned with the node of the ABI version that introduced it (capi/panto.map,
#      the header's "Since ABI 1.N"), and its soname is libpanto.so.<ABI major>. A
#      program that uses a 1.1 function, run on a library that has only PANTO_1.0, is
#      refused by the dynamic loader with "version `PANTO_1.1' not found"; a 1.0 program
#      runs there.
#   3. PANTO_ABI_VERSION_MAJOR/MINOR equal capi/Cargo.toml's major.minor.
#   4. The header compiles standalone as C11, C++98 and C++17 with -Wall -Wextra -Werror
#      -pedantic, including its macros.
#   5. sizeof/alignof/offsetof of every struct field, as the C compiler sees the header,
#      equal Rust's (the Rust test layout_agrees_with_the_c_compiler compiles the probe).
#   6. The checker's own test: a signature changed on one side only, fields reordered, a
#      constant changed, a symbol missing, a version bumped on one side — each must fail.
#   7. The header against the released one (baseline/panto.h, ABI 1.2.0 of v0.1.0):
#      nothing a program built against the release uses is removed, retyped, moved or
#      renumbered (capi/tools/abi_check.py baseline); then that check's own test: each
#      kind of break, made in a copy of the baseline, must fail, and each allowed change
#      (a function, a constant or a trailing field added, a reserved field taken) pass.
#
#   scripts/check-header.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
target="$CARGO_TARGET_DIR"
cc="${CC:-cc}"
cxx="${CXX:-c++}"
header=capi/include/panto.h
out="$target/capi-abi"
mkdir -p "$out"

say() { printf -- '--- %s\n' "$*"; }

# cbindgen output can differ between point releases; the comparison is semantic, so any
# 0.29.x will do, and 0.29.4 is what gets installed.
cbindgen_version=0.29.4
if ! cbindgen --version 2>/dev/null | grep -q '^cbindgen 0\.29\.'; then
  say "installing cbindgen $cbindgen_version"
  cargo install --locked --quiet cbindgen --version "=$cbindgen_version"
fi
if ! python3 -c 'import pycparser' 2>/dev/null; then
  say "installing pycparser"
  python3 -m pip install --quiet pycparser
fi

say "1. header vs the Rust crate ($(cbindgen --version))"
generated="$out/panto.generated.h"
cbindgen --quiet --config capi/cbindgen.toml --lockfile "$PWD/Cargo.lock" \
  --output "$generated" capi
python3 capi/tools/abi_check.py diff "$header" "$generated"

say "2. exported symbols, their versions, and the soname"
scripts/debug-build.sh --locked --quiet -p panto-capi
lib=$(capi/tools/link-shared.sh "$target/debug")
python3 capi/tools/abi_check.py symbols "$header" "$lib" capi/panto.map
major=$(sed -n 's/^version = "\([0-9][0-9]*\)\..*"/\1/p' capi/Cargo.toml | head -n 1)
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" != "libpanto.so.$major" ]; then
  echo "ABI DRIFT: soname is '$soname', expected libpanto.so.$major" >&2
  exit 1
fi
echo "soname: $soname: OK"
# A newer program on an older library: a stand-in for a 1.0 libpanto.so.1 (one 1.0
# function, the PANTO_1.0 node only) and two programs linked against the real library.
old="$out/abi-1.0"
mkdir -p "$old/lib" "$old/link"
ln -sf "$lib" "$old/link/libpanto.so"
printf 'PANTO_1.0 { global: panto_abi_version; local: *; };\n' >"$old/1.0.map"
printf '#include <stdint.h>\nuint32_t panto_abi_version(void) { return 1u << 16; }\n' |
  "$cc" -shared -fPIC -x c - -Wl,--version-script="$old/1.0.map" \
    -Wl,-soname,"libpanto.so.$major" -o "$old/lib/libpanto.so.$major"
cat >"$old/uses-1.0.c" <<'C'
#include "panto.h"
int main(void) { return panto_abi_version() >> 16 == 1 ? 0 : 1; }
C
cat >"$old/uses-1.1.c" <<'C'
#include "panto.h"
int main(void) {
  PantoCancelToken *t = panto_cancel_token_new();
  panto_cancel_token_free(t);
  return panto_abi_version() >> 16 == 1 ? 0 : 1;
}
C
for p in uses-1.0 uses-1.1; do
  "$cc" -std=c11 -I capi/include "$old/$p.c" -L "$old/link" -lpanto -o "$old/$p"
done
LD_LIBRARY_PATH="$old/lib" "$old/uses-1.0"
if LD_LIBRARY_PATH="$old/lib" "$old/uses-1.1" 2>"$old/uses-1.1.err"; then
  echo "ABI DRIFT: a program using a 1.1 function started on a 1.0 library" >&2
  exit 1
fi
if ! grep -q "version \`PANTO_1.1' not found" "$old/uses-1.1.err"; then
  echo "ABI DRIFT: a 1.1 program on a 1.0 library failed, but not with the version message:" >&2
  cat "$old/uses-1.1.err" >&2
  exit 1
fi
echo "a 1.1 program on a 1.0 library: $(sed 's/^.*: //' "$old/uses-1.1.err"): OK"

say "3. version macros vs capi/Cargo.toml"
python3 capi/tools/abi_check.py version "$header" capi/Cargo.toml

say "4. the header compiles standalone (C11, C++98, C++17; -Wall -Wextra -Werror -pedantic)"
cat >"$out/standalone.c" <<'C'
#include "panto.h"
/* Every macro of the header is usable as documented. */
int main(void) {
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoString s = {0, 0};
  panto_string_free(&s);
  return (int)ev.kind + (panto_abi_version() == PANTO_ABI_VERSION ? 0 : 1) + PANTO_EVENT +
         PANTO_ERR_CONFIG * 0;
}
C
cp "$out/standalone.c" "$out/standalone.cpp"
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic -I capi/include -c "$out/standalone.c" \
  -o "$out/standalone-c.o"
for std in c++98 c++17; do
  "$cxx" -std=$std -Wall -Wextra -Werror -pedantic -I capi/include -c "$out/standalone.cpp" \
    -o "$out/standalone-$std.o"
done
echo "C11, C++98 and C++17: OK"

say "5. struct layouts: C compiler vs Rust"
# After scripts/test.sh's workspace build, the test binary it built (no narrower rebuild).
if [ -n "${PANTO_DEBUG_BUILT:-}" ]; then
  cargo test --locked --quiet --workspace --lib layout_agrees_with_the_c_compiler
else
  cargo test --locked --quiet -p panto-capi --lib layout_agrees_with_the_c_compiler
fi

say "6. the checker's self-test"
python3 capi/tools/abi_check.py selftest "$header" "$generated" "$lib"

say "7. the header against the released baseline (baseline/panto.h) and that check's self-test"
python3 capi/tools/abi_check.py baseline baseline/panto.h "$header"
python3 capi/tools/abi_check.py baseline-selftest baseline/panto.h
