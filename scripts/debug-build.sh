#!/usr/bin/env bash
# `cargo build ARGS…` of debug targets the other scripts run (the CLI, the test server,
# the examples, libpanto), unless PANTO_DEBUG_BUILT is set: scripts/test.sh sets it once
# its `cargo build --workspace --all-targets` has built every one of them. A narrower
# `cargo build -p …` resolves the dependencies' features for fewer packages (the CLI's
# dependencies turn on features of libc and bitflags that tokio, reqwest and panto are
# then built against), so each such build would compile the dependency tree again.
set -euo pipefail
if [ -n "${PANTO_DEBUG_BUILT:-}" ]; then
  exit 0
fi
exec cargo build "$@"
