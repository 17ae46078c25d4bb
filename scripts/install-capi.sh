#!/usr/bin/env bash
# Builds libpanto in release mode and installs the C ABI under PREFIX:
#
#   PREFIX/include/panto.h
#   PREFIX/lib/libpanto.so.X.Y.Z, libpanto.so.X -> it (the soname), libpanto.so -> that
#     (symbol versions PANTO_1.0, PANTO_1.1…: capi/panto.map)
#   PREFIX/lib/libpanto.a, and PREFIX/lib/panto-static/libpanto.a -> ../libpanto.a
#   PREFIX/lib/pkgconfig/panto.pc, panto-link.pc (the second is panto.pc's -lpanto)
#   PREFIX/share/panto/valgrind.supp, tsan.supp (suppressions for programs using it)
#
#   scripts/install-capi.sh PREFIX        e.g. /usr/local, or "$HOME/.local"
#
# LIBDIR overrides PREFIX/lib; DESTDIR stages the install (files go to DESTDIR/PREFIX/…,
# panto.pc still names PREFIX). Then: cc prog.c $(pkg-config --cflags --libs panto), or
# with --static for libpanto.a: a directory holding only the static library comes first
# on the search path then (see capi/panto.pc.in), so -lpanto cannot pick the .so.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 PREFIX" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
prefix=$1
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
libdir="${LIBDIR:-$prefix/lib}"
includedir="$prefix/include"
dest="${DESTDIR:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
release="$CARGO_TARGET_DIR/release"

# `cargo rustc` (rather than `cargo build`) so rustc reports the system libraries a
# program linking the static library needs; they are only reported when the crate is
# compiled, so the last report is kept beside the build.
version=$(sed -n 's/^version = "\([0-9][0-9.]*\)"/\1/p' capi/Cargo.toml | head -n 1)
major=${version%%.*}
native_file="$release/libpanto.native-static-libs"
build_log=$(cargo rustc --locked --release -p panto-capi --lib -- --print native-static-libs 2>&1) || {
  printf '%s\n' "$build_log" >&2
  exit 1
}
native=$(printf '%s\n' "$build_log" | sed -n 's/.*native-static-libs: //p' | tail -n 1)
if [ -n "$native" ]; then
  printf '%s\n' "$native" >"$native_file"
elif [ -f "$native_file" ]; then
  native=$(cat "$native_file")
else
  # Built before by another command: what Rust's standard library needs on this target.
  native="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
fi

shared=$(capi/tools/link-shared.sh "$release")

install -d "$dest$libdir/pkgconfig" "$dest$libdir/panto-static" "$dest$includedir" \
  "$dest$prefix/share/panto"
install -m 0644 capi/include/panto.h "$dest$includedir/panto.h"
install -m 0755 "$shared" "$dest$libdir/libpanto.so.$version"
ln -sfn "libpanto.so.$version" "$dest$libdir/libpanto.so.$major"
ln -sfn "libpanto.so.$major" "$dest$libdir/libpanto.so"
install -m 0644 "$release/libpanto.a" "$dest$libdir/libpanto.a"
ln -sfn ../libpanto.a "$dest$libdir/panto-static/libpanto.a"
for pc in panto panto-link; do
  sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@INCLUDEDIR@|$includedir|" \
    -e "s|@VERSION@|$version|" -e "s|@LIBS_PRIVATE@|$native|" \
    "capi/$pc.pc.in" >"$dest$libdir/pkgconfig/$pc.pc"
  chmod 0644 "$dest$libdir/pkgconfig/$pc.pc"
done
install -m 0644 capi/tests/c/valgrind.supp capi/tsan.supp "$dest$prefix/share/panto/"

echo "installed libpanto $version (ABI $major) under $dest$prefix"
echo "  build:  cc prog.c \$(pkg-config --cflags --libs panto)"
echo "  static: cc prog.c \$(pkg-config --cflags --static --libs panto)"
echo "  (pkg-config needs PKG_CONFIG_PATH=$libdir/pkgconfig unless that is a system path)"
