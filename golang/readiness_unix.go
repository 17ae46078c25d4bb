//go:build unix

package panto

import (
	"os"
	"syscall"
)

// pollable wraps the ready set's descriptor fd for the netpoller (it is non-blocking,
// so os.NewFile registers it). The file is never closed: the set, which owns the
// descriptor, lives as long as the process (wait.go). Nil if the netpoller will not
// take it.
func pollable(fd int64) (syscall.RawConn, *os.File) {
	f := os.NewFile(uintptr(fd), "panto-ready-set")
	if f == nil {
		return nil, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, nil
	}
	return rc, f
}
