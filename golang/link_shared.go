//go:build panto_shared

package panto

// Shared linking, with `go build -tags panto_shared`: libpanto.so is found through
// pkg-config (panto.pc, installed by scripts/install-capi.sh; set PKG_CONFIG_PATH to
// PREFIX/lib/pkgconfig when that is not a system path). At run time the dynamic loader
// must find libpanto.so.1 too (a system path, LD_LIBRARY_PATH, or -Wl,-rpath in
// CGO_LDFLAGS).

/*
#cgo pkg-config: panto
*/
import "C"
