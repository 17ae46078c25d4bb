#!/usr/bin/env bash
# link-shared.sh DIR — makes DIR/libpanto.so from DIR/libpanto.a (a cargo profile
# directory: target/debug or target/release) with the symbol versions of capi/panto.map
# and the soname libpanto.so.<ABI major>.
#
# Why not cargo's cdylib: rustc links a cdylib with a version script of its own (an
# anonymous one listing the exports), and GNU ld refuses to combine an anonymous version
# with named ones ("anonymous version tag cannot be combined with other version tags").
# Linking the static library, which holds exactly the same code, with our script alone
# works with every ELF linker. Prints the library's path; does nothing if it is newer
# than its inputs.
set -euo pipefail
dir=${1:?usage: link-shared.sh CARGO_PROFILE_DIR}
capi="$(cd "$(dirname "$0")/.." && pwd)"
archive="$dir/libpanto.a"
map="$capi/panto.map"
so="$dir/libpanto.so"
if [ ! -f "$archive" ]; then
  echo "link-shared.sh: $archive is missing (cargo build -p panto-capi first)" >&2
  exit 1
fi
if [ "$so" -nt "$archive" ] && [ "$so" -nt "$map" ] && [ "$so" -nt "$0" ]; then
  echo "$so"
  exit 0
fi
major=$(sed -n 's/^version = "\([0-9][0-9]*\)\..*"/\1/p' "$capi/Cargo.toml" | head -n 1)
# What Rust's standard library needs (scripts/install-capi.sh records rustc's own list
# beside a release build).
native=$(cat "$dir/libpanto.native-static-libs" 2>/dev/null ||
  echo "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc")
# Like cargo's release profile, which strips debug info from the cdylib by default.
strip=()
case "$(basename "$dir")" in release) strip=(-Wl,--strip-debug) ;; esac
# shellcheck disable=SC2086  # $native is a list of flags
"${CC:-cc}" -shared -o "$so.tmp" \
  -Wl,--whole-archive "$archive" -Wl,--no-whole-archive \
  -Wl,--version-script="$map" -Wl,--no-undefined-version -Wl,--no-undefined \
  -Wl,-soname,"libpanto.so.$major" -Wl,--gc-sections -Wl,--as-needed \
  -Wl,-z,relro,-z,now -Wl,-z,noexecstack "${strip[@]}" $native
mv -f "$so.tmp" "$so"
echo "$so"
