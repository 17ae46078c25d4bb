//go:build !panto_shared

package panto

// Static linking (the default). The library is found by name, libpanto.a, in the
// directories given with -L: by default the repository's release build directory,
// otherwise whatever CGO_LDFLAGS adds (for example -L/usr/local/lib after
// scripts/install-capi.sh, or -L$CARGO_TARGET_DIR/release). The system libraries after
// it are the ones Rust's standard library needs on Linux
// (`pkg-config --static --libs panto` lists them for an installed copy).
//
// This is the repository's (the developer's) link path. The released module
// (scripts/release.sh, docs/releasing.md) has no link_static.go: generated
// link_prebuilt_GOOS_GOARCH.go files link the libpanto.a it carries in prebuilt/.

/*
#cgo LDFLAGS: -L${SRCDIR}/../target/release -l:libpanto.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
*/
import "C"
