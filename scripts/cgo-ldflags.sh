#!/usr/bin/env bash
# cgo-ldflags.sh RELEASE_DIR — prints the CGO_LDFLAGS that link the static libpanto.a in
# RELEASE_DIR. Go's build cache looks at CGO_LDFLAGS, never at the library itself, so a
# rebuilt libpanto.a would not be relinked; the second -L (a directory that need not
# exist) carries a checksum of the library, which makes every rebuild a new cache key.
set -euo pipefail
dir=${1:?usage: cgo-ldflags.sh RELEASE_DIR}
stamp=$(cksum <"$dir/libpanto.a" | cut -d' ' -f1)
printf '%s\n' "-L$dir -L$dir/.libpanto-$stamp"
