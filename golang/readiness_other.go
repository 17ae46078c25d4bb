//go:build !unix

package panto

import (
	"os"
	"syscall"
)

// pollable: no descriptor the netpoller can wait on here (streams wait in the library).
func pollable(int64) (syscall.RawConn, *os.File) { return nil, nil }
